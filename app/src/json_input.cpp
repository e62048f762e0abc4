#include "json_input.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "app_error.h"
#include "printable.h"

namespace fusedops_app {

nlohmann::json parse_json_without_duplicate_keys(const std::string& text,
                                                 const std::string& source) {
  using Event = nlohmann::json::parse_event_t;
  // The keys seen so far in each object being parsed, innermost last.
  std::vector<std::set<std::string>> open_objects;
  const nlohmann::json::parser_callback_t check_keys = [&](int /*depth*/, Event event,
                                                           nlohmann::json& parsed) {
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      open_objects.pop_back();
    } else if (event == Event::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) {
        throw UsageError(fmt::format("{}: the key \"{}\" appears twice in one object; a file "
                                     "scripted/export.py writes never repeats a key",
                                     source, printable(key)));
      }
    }
    return true;  // keep every value
  };
  return nlohmann::json::parse(text, check_keys);
}

}  // namespace fusedops_app
