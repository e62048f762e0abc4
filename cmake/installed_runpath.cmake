# fusedops_set_installed_runpath(<file under the install prefix> <runpath, "" for none>)
#
# Sets the RUNPATH of an installed binary at install time. CMake's own mechanism (a target
# whose INSTALL_RPATH differs from its build-tree RUNPATH) pads the build-tree RUNPATH with a
# trailing ':' so that the install step can rewrite it in place; the loader reads that empty
# entry as the current directory, so a build-tree binary would load any library of the same
# name planted where it is run (issue 14). Targets installed through this function are built
# with their final build-tree RUNPATH (no padding) and edited here after the copy.
function(fusedops_set_installed_runpath installed_file runpath)
  set(_file "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${installed_file}")
  if(runpath STREQUAL "")
    install(CODE "file(RPATH_REMOVE FILE \"${_file}\")")
  else()
    install(CODE "file(RPATH_SET FILE \"${_file}\" NEW_RPATH \"${runpath}\")")
  endif()
endfunction()
