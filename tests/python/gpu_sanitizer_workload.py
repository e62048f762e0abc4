"""Runs every fusedops CUDA kernel once per dtype at small, odd sizes and checks the result
against the reference model. Meant to run under compute-sanitizer (memcheck, racecheck):
scripts/gpu_check.sh does that. Exits non-zero on any mismatch."""
import copy
import sys

import torch

import fusedops
from fusedops.accuracy import Tolerance, within_tolerance
from fusedops.problems import PROBLEMS

CASES = [  # odd widths, a pool that does not divide, tiny groups, batch 3
    ("98", (77, 50, 7, -1.5)),
    ("18", (77, 50)),
    ("39", (77, 50, (50,))),  # width not a multiple of 4: the streaming passes
    ("39", (77, 52, (52,))),  # multiple of 4, not of 32: the one-read kernel, a partial block
    ("62", (80, 51, 3)),      # K a multiple of 4: batch 3 runs the skinny GEMM, odd width
    ("62", (77, 48, 6)),
]


def engine_case(key, init_args, m, k, label, refused_weight=False):
    """One forward through the forced 3xFP16 engine with guarded and zero rows, in eval mode,
    against the reference; prints and returns whether it matched. refused_weight: W holds an
    inf, and the call makes W's fold (its range check, on the GPU, refuses it) while the GPU is
    busy: every row guarded."""
    prob = PROBLEMS[key]
    ref = prob.model(*init_args).cuda().eval()
    new = prob.model_new(*init_args).cuda().eval()
    new.load_state_dict(ref.state_dict())
    if refused_weight:
        with torch.no_grad():
            for model in (ref, new):
                model.gemm.weight[5, 7] = float("inf")  # model 39
        torch.cuda._sleep(20_000_000)
    x = torch.randn(m, k, device="cuda")
    x[1, 3] = float("inf")
    x[2] *= 2.0 ** -140
    x[3] = 0.0
    with torch.no_grad():
        out_ref, out_new = ref(x), new(x)
    torch.cuda.synchronize()
    ok = torch.allclose(out_new, out_ref, atol=1e-4, rtol=1e-4, equal_nan=True)
    print(f"{label}: {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    failures = 0
    torch.manual_seed(0)
    for key, init_args in CASES:
        prob = PROBLEMS[key]
        for dtype, tol in ((torch.float32, 1e-4), (torch.float64, 1e-9), (torch.float16, 2e-2)):
            for batch in (3, 300):
                ref = prob.model(*init_args).cuda().to(dtype)
                new = prob.model_new(*init_args).cuda().to(dtype)
                new.load_state_dict(ref.state_dict())
                x = prob.make_input(batch, init_args, dist="randn", dtype=dtype, device="cuda")
                with torch.no_grad():
                    out_ref, out_new = ref(x), new(x)
                torch.cuda.synchronize()
                ok = torch.allclose(out_new.double(), out_ref.double(), atol=tol, rtol=tol)
                if key == "39":
                    ok &= torch.allclose(new.bn.running_mean.double(), ref.bn.running_mean.double(),
                                         atol=tol, rtol=tol)
                print(f"{key} {init_args} {dtype} batch {batch}: {'ok' if ok else 'MISMATCH'}")
                failures += not ok
    # numerics="eager" (float16/bfloat16 y in the model's dtype): model 39's resident kernel
    # (n % 8 == 0, a part-empty 64-column block; 3 and 300 rows) and its streaming passes (1100
    # rows: the normalize pass's batched rows and tail); model 62's eager GroupNorm kernel on
    # whole 16-byte groups (64 / 4 = 16 channels) and on groups that are not (48 / 3).
    for key, init_args in (("39", (77, 56, (56,))), ("62", (77, 64, 4)), ("62", (80, 48, 3))):
        prob = PROBLEMS[key]
        for dtype in (torch.float16, torch.bfloat16):
            for batch in (3, 300, 1100):
                ref = prob.model(*init_args).cuda().to(dtype)
                new = prob.model_new(*init_args, numerics="eager").cuda().to(dtype)
                new.load_state_dict(ref.state_dict())
                x = prob.make_input(batch, init_args, dist="randn", dtype=dtype, device="cuda")
                with torch.no_grad():
                    out_ref, out_new = ref(x), new(x)
                torch.cuda.synchronize()
                ok = torch.allclose(out_new.double(), out_ref.double(), atol=2e-2, rtol=2e-2)
                print(f"{key} {init_args} {dtype} eager batch {batch}: "
                      f"{'ok' if ok else 'MISMATCH'}")
                failures += not ok
    # The float32 skinny kernel (1-4 rows, SGEMM named) in each of its K splits: 1, 2, 4 and 8
    # warps a pair of W's rows, odd widths (a warp left with one row, a partial block).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with fusedops.settings(FUSEDOPS_FP32_GEMM="ieee"):
        for n in (32 * sms + 1, 16 * sms + 1, 8 * sms + 1, 51):
            prob = PROBLEMS["39"]
            ref = prob.model(132, n, (n,)).cuda().eval()
            new = prob.model_new(132, n, (n,)).cuda().eval()
            new.load_state_dict(ref.state_dict())
            x = torch.randn(4, 132, device="cuda")
            ok = True
            with torch.no_grad():
                for batch in (1, 3, 4):
                    (line,) = fusedops.explain(new, x[:batch])
                    ok &= ": skinny (" in line and torch.allclose(
                        new(x[:batch]), ref(x[:batch]), atol=1e-4, rtol=1e-4)
            torch.cuda.synchronize()
            print(f"39 eval skinny float32 132x{n}: {'ok' if ok else 'MISMATCH'}")
            failures += not ok
    # The 3xFP16 engine (Hopper), forced at small sizes: model 39 with split-K active (two
    # output tiles) and without; model 98, whose fused epilogue sums the K-slices itself (pooled
    # width 52, odd K, a pool leaving rows over). Rows the range guard sends to the exact path
    # (inf, a denormal row whose scale leaves float32's range) and a zero row.
    if torch.cuda.get_device_capability() == (9, 0):
        with fusedops.settings(FUSEDOPS_FP32_GEMM="3xfp16"):
            for m, n, k in ((128, 256, 1024), (300, 260, 513)):
                failures += not engine_case("39", (k, n, (n,)), m, k,
                                            f"39 eval 3xfp16 {m}x{n}x{k}")
            failures += not engine_case("98", (1001, 366, 7, -1.5), 77, 1001,
                                        "98 3xfp16 77x366x1001")
            failures += not engine_case("39", (1024, 256, (256,)), 128, 1024,
                                        "39 eval 3xfp16 refused weight", refused_weight=True)
        # TF32 allowed, model 39 in training above 1024 rows: the one-product GEMM with the
        # column moments in its epilogue (a partial last tile of 76 rows, a partial 256-wide
        # tile, a guarded row), and a width so narrow that K is split (its own route: the moments
        # taken from y).
        saved = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        try:
            for m, n, k, route in ((1100, 1800, 300, "1xfp16-fused"),
                                   (1100, 260, 4100, "1xfp16-splitk")):
                prob = PROBLEMS["39"]
                ref = prob.model(k, n, (n,)).cuda().double()
                new = prob.model_new(k, n, (n,)).cuda()
                new.load_state_dict(ref.state_dict())
                x = torch.randn(m, k, device="cuda")
                x[700, : k // 2] *= 2.0 ** 20
                x[700, k // 2:] *= 2.0 ** -20
                with torch.no_grad():
                    (line,) = fusedops.explain(copy.deepcopy(new), x)
                    out_ref, out_new = ref(x.double()), new(x)
                torch.cuda.synchronize()
                ok = f": {route} (" in line and torch.allclose(
                    out_new.double(), out_ref, atol=2e-2, rtol=2e-2) and torch.allclose(
                    new.bn.running_var.double(), ref.bn.running_var, atol=2e-2, rtol=2e-2)
                print(f"39 training tf32 {m}x{n}x{k}: {'ok' if ok else 'MISMATCH ' + line}")
                failures += not ok
            # Model 98's pooled weight: two products (x_hi W_lo in its own GEMM, split over K),
            # summed in the row epilogue, with a guarded row.
            prob = PROBLEMS["98"]
            ref = prob.model(1001, 16384, 8, -1.5).cuda().double()
            new = prob.model_new(1001, 16384, 8, -1.5).cuda()
            new.load_state_dict(ref.state_dict())
            x = torch.randn(300, 1001, device="cuda")
            x[70, :500] *= 2.0 ** 20
            x[70, 500:] *= 2.0 ** -20
            with torch.no_grad():
                (line,) = fusedops.explain(new, x)
                out_ref, out_new = ref(x.double()), new(x)
            torch.cuda.synchronize()
            ok = ": 2xfp16-fused (" in line and torch.allclose(out_new.double(), out_ref,
                                                                atol=1e-3, rtol=1e-3)
            print(f"98 tf32 300x2048x1001: {'ok' if ok else 'MISMATCH ' + line}")
            failures += not ok
        finally:
            torch.backends.cuda.matmul.fp32_precision = saved
        # Model 39 in training above 1024 rows in float16/bfloat16: the column moments in the
        # half GEMM's epilogue; nine 128-row tiles (a tenth past M from the 2 x 1 clusters), a
        # partial 256-wide tile.
        for dtype in (torch.float16, torch.bfloat16):
            prob = PROBLEMS["39"]
            ref = prob.model(264, 3844, (3844,)).cuda().to(dtype)
            new = prob.model_new(264, 3844, (3844,)).cuda().to(dtype)
            new.load_state_dict(ref.state_dict())
            x = torch.randn(1100, 264, device="cuda", dtype=dtype)
            with torch.no_grad():
                (line,) = fusedops.explain(copy.deepcopy(new), x)
                out_ref, out_new = ref(x), new(x)
            torch.cuda.synchronize()
            ok = ": sm90-half-fused (" in line and torch.allclose(
                out_new.double(), out_ref.double(), atol=5e-2, rtol=5e-2) and torch.allclose(
                new.bn.running_var.double(), ref.bn.running_var.double(), atol=5e-2, rtol=5e-2)
            print(f"39 training {dtype} moments half GEMM 1100x264x3844: "
                  f"{'ok' if ok else 'MISMATCH ' + line}")
            failures += not ok
        # The native half GEMM with model 62's epilogue fused, forced: partial tiles in M, N
        # (400 = 3 x 128 + 16) and K (520), groups of 16; and groups of 32 over two tiles.
        with fusedops.settings(FUSEDOPS_HALF_GEMM="fused"):
            for (m, k, n, groups), dtype in (((300, 520, 400, 25), torch.float16),
                                             ((129, 136, 256, 8), torch.bfloat16)):
                prob = PROBLEMS["62"]
                ref = prob.model(k, n, groups).cuda().to(dtype)
                new = prob.model_new(k, n, groups).cuda().to(dtype)
                new.load_state_dict(ref.state_dict())
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                with torch.no_grad():
                    out_ref, out_new = ref(x), new(x)
                torch.cuda.synchronize()
                ok = torch.allclose(out_new.double(), out_ref.double(), atol=5e-2, rtol=5e-2)
                print(f"62 {dtype} fused half GEMM {m}x{k}x{n} groups {groups}: {'ok' if ok else 'MISMATCH'}")
                failures += not ok
            # Its autocast form: float32 parameters and output, the epilogue that loads gamma
            # and beta a few blocks at a time.
            prob = PROBLEMS["62"]
            ref = prob.model(520, 400, 25).cuda()
            new = prob.model_new(520, 400, 25).cuda()
            new.load_state_dict(ref.state_dict())
            x = torch.randn(300, 520, device="cuda")
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                (line,) = fusedops.explain(new, x)
                out_ref, out_new = ref(x), new(x)
            torch.cuda.synchronize()
            ok = ": sm90-half-fused (" in line and out_new.dtype == torch.float32 and torch.allclose(
                out_new.double(), out_ref.double(), atol=5e-2, rtol=5e-2)
            print(f"62 autocast float16 fused half GEMM 300x520x400: {'ok' if ok else 'MISMATCH ' + line}")
            failures += not ok
    # The skinny-half kernel (at most 16 rows of float16/bfloat16, sm_80+), in eval mode as
    # served: plain (model 98's pooled weight, 10 rows), with model 62's epilogue (groups of 16
    # and of 32 channels) and with model 39's; in_features 264 = 256 + 8 leaves a partial round.
    # Its float32 form (skinny-3xfp16: fp16 pairs, 3-32 rows) at 5 and 11 rows, with a row the
    # split's guard sends to the kernel's exact path.
    if torch.cuda.get_device_capability()[0] >= 8:
        for key, init_args in (("98", (264, 50, 5, 2.0)), ("62", (264, 48, 3)),
                               ("62", (264, 96, 3)), ("39", (264, 50, (50,)))):
            prob = PROBLEMS[key]
            for dtype, batch in ((torch.float16, 3), (torch.bfloat16, 11), (torch.float32, 5),
                                 (torch.float32, 11)):
                ref = prob.model(*init_args).cuda().to(dtype).eval()
                new = prob.model_new(*init_args).cuda().to(dtype).eval()
                new.load_state_dict(ref.state_dict())
                x = prob.make_input(batch, init_args, dist="randn", dtype=dtype, device="cuda")
                tol = 5e-2
                out64 = None
                if dtype == torch.float32:
                    x[1, :100] *= 2.0 ** 20
                    x[1, 100:] *= 2.0 ** -20
                    tol = 1e-4
                with torch.no_grad():
                    (line,) = fusedops.explain(new, x)
                    out_ref, out_new = ref(x), new(x)
                    if dtype == torch.float32:
                        # Row 1's outputs (up to 1e6) can cancel to a few hundred, where the
                        # float32 reference itself is off by more than 1e-4 (0.07 at -610.80 in
                        # one case): the contract's float64 clause (fusedops.accuracy).
                        ref64 = prob.model(*init_args).cuda().double().eval()
                        ref64.load_state_dict(ref.state_dict())
                        out64 = ref64(x.double())
                torch.cuda.synchronize()
                ok = "skinny-" in line and bool(within_tolerance(
                    out_new, out_ref, Tolerance(atol=tol, rtol=tol), out64).all())
                print(f"{key} {init_args} {dtype} batch {batch} {line.split(': ')[-1].split(' ')[0]}: "
                      f"{'ok' if ok else 'MISMATCH ' + line}")
                failures += not ok
    # The float32 form's 64-row blocks (N >= 32 SMs), their loads staged in shared memory
    # (cp.async): 24 rows (one chunk), 50 (two chunks of x's rows, the second partial), with
    # model 62's epilogue (groups of 16), model 39's (eval) and none (39 in training); guarded
    # rows in the first chunk and the last (the kernel's exact path, its chunk's offsets);
    # in_features 264 leaves a partial round.
    if torch.cuda.get_device_capability()[0] >= 8:
        n = 32 * torch.cuda.get_device_properties(0).multi_processor_count + 16
        for key, init_args, train in (("62", (264, n, n // 16), False),
                                      ("39", (264, n, (n,)), False), ("39", (264, n, (n,)), True)):
            prob = PROBLEMS[key]
            for batch in (24, 50):
                ref = prob.model(*init_args).cuda().train(train)
                new = prob.model_new(*init_args).cuda().train(train)
                new.load_state_dict(ref.state_dict())
                x = prob.make_input(batch, init_args, dist="randn", device="cuda")
                if not train:  # (in training an inf spreads over its columns' statistics)
                    x[3, 5] = float("inf")
                x[batch - 2, :100] *= 2.0 ** 20
                x[batch - 2, 100:] *= 2.0 ** -20
                ref64 = prob.model(*init_args).cuda().double().train(train)
                ref64.load_state_dict(ref.state_dict())
                with torch.no_grad():
                    (line,) = fusedops.explain(new, x)
                    out_ref, out_new, out64 = ref(x), new(x), ref64(x.double())
                torch.cuda.synchronize()
                ok = ": skinny-3xfp16" in line and bool(within_tolerance(
                    out_new, out_ref, Tolerance(atol=1e-4, rtol=1e-4), out64).all())
                print(f"{key} float32 {'train' if train else 'eval'} batch {batch} 64-row blocks "
                      f"{line.split(': ')[-1].split(' ')[0]}: {'ok' if ok else 'MISMATCH ' + line}")
                failures += not ok
    # The plain form at 17-32 rows of x (four 8-row tiles), where W is narrow: model 98's pooled
    # weight (50 channels pooled by 5: 10 rows of W) at 24 and 32 rows.
    if torch.cuda.get_device_capability()[0] >= 8:
        prob = PROBLEMS["98"]
        for dtype, batch in ((torch.float16, 24), (torch.bfloat16, 32)):
            ref = prob.model(264, 50, 5, 2.0).cuda().to(dtype).eval()
            new = prob.model_new(264, 50, 5, 2.0).cuda().to(dtype).eval()
            new.load_state_dict(ref.state_dict())
            x = prob.make_input(batch, (264, 50, 5, 2.0), dist="randn", dtype=dtype, device="cuda")
            with torch.no_grad():
                (line,) = fusedops.explain(new, x)
                out_ref, out_new = ref(x), new(x)
            torch.cuda.synchronize()
            ok = ": skinny-half (" in line and torch.allclose(
                out_new.double(), out_ref.double(), atol=5e-2, rtol=5e-2)
            print(f"98 {dtype} batch {batch} skinny-half four tiles: {'ok' if ok else 'MISMATCH ' + line}")
            failures += not ok
    # Model 98's row reduction on the weight-streaming kernels' K-slice partials (pooled width
    # 40, a multiple of 4): 3 or 5 rows (one 8-row tile; float32 runs its skinny kernel up to
    # 4 rows of a narrow W), 11 (two), 40 (two chunks of 32 rows), 100 (four, the last of 4
    # rows); float32 with a guarded row, which the reduction recomputes.
    if torch.cuda.get_device_capability()[0] >= 8:
        prob = PROBLEMS["98"]
        init_args = (264, 200, 5, 2.0)
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            ref = prob.model(*init_args).cuda().to(dtype).eval()
            new = prob.model_new(*init_args).cuda().to(dtype).eval()
            new.load_state_dict(ref.state_dict())
            for batch in (5 if dtype == torch.float32 else 3, 11, 40, 100):
                x = prob.make_input(batch, init_args, dist="randn", dtype=dtype, device="cuda")
                if dtype == torch.float32:
                    x[1, 3] = float("inf")
                    x[2, :100] *= 2.0 ** 20
                    x[2, 100:] *= 2.0 ** -20
                with torch.no_grad():
                    (line,) = fusedops.explain(new, x)
                    out_ref, out_new = ref(x), new(x)
                torch.cuda.synchronize()
                tol = 1e-4 if dtype == torch.float32 else 5e-2
                ok = "-fused (" in line and torch.allclose(
                    out_new.double(), out_ref.double(), atol=tol, rtol=tol, equal_nan=True)
                print(f"98 {dtype} batch {batch} K-slice partials: "
                      f"{'ok' if ok else 'MISMATCH ' + line}")
                failures += not ok
    # The float32 form's wider blocks, where N gives half the SMs one: 32 rows of W a block at
    # 9-16 rows of x (two groups of 16 channels a block), 64 at 17-32 (four).
    if torch.cuda.get_device_capability()[0] >= 8:
        n = 32 * torch.cuda.get_device_properties(0).multi_processor_count + 16
        for key, init_args, batch in (("62", (264, n, n // 16), 12), ("62", (264, n, n // 16), 24),
                                      ("39", (264, n, (n,)), 24)):
            prob = PROBLEMS[key]
            ref = prob.model(*init_args).cuda().eval()
            new = prob.model_new(*init_args).cuda().eval()
            new.load_state_dict(ref.state_dict())
            x = prob.make_input(batch, init_args, dist="randn", device="cuda")
            with torch.no_grad():
                (line,) = fusedops.explain(new, x)
                out_ref, out_new = ref(x), new(x)
            torch.cuda.synchronize()
            ok = "skinny-3xfp16" in line and torch.allclose(out_new, out_ref, atol=1e-4, rtol=1e-4)
            print(f"{key} float32 n={n} batch {batch} wide blocks: {'ok' if ok else 'MISMATCH ' + line}")
            failures += not ok
    # The backward (issue 40): a float32 training step of each model, gradients against the
    # float64 reference; model 62's at groups of 1, 3, 16 and 40 channels (one lane, a partial
    # warp, the default, more than a warp) through its one-pass backward kernel, 39's with the
    # forward's y kept.
    for key, init_args in (("98", (77, 50, 7, -1.5)), ("18", (77, 50)), ("39", (77, 50, (50,))),
                           ("62", (77, 48, 48)), ("62", (77, 48, 16)), ("62", (77, 64, 4)),
                           ("62", (77, 80, 2))):
        prob = PROBLEMS[key]
        ref = prob.model(*init_args).cuda().double()
        new = prob.model_new(*init_args).cuda()
        new.load_state_dict(ref.state_dict())
        x = prob.make_input(300, init_args, dist="randn", device="cuda")
        g = torch.randn(300, *new(x).shape[1:], device="cuda")
        grads = []
        for model, xin, gin in ((ref, x.double(), g.double()), (new, x, g)):
            xin = xin.clone().requires_grad_()
            model(xin).backward(gin)
            grads.append([xin.grad] + [p.grad for p in model.parameters()])
        torch.cuda.synchronize()
        ok = all(torch.allclose(a.double(), e, atol=1e-3 * max(1.0, e.abs().max().item()),
                                rtol=1e-3) for a, e in zip(grads[1], grads[0]))
        print(f"{key} {init_args} float32 training step: {'ok' if ok else 'MISMATCH'}")
        failures += not ok
    # Model 98's backward after its pooled GEMM in bfloat16 (the helper's CUDA kernels in a half
    # dtype), against the same helper on the CPU.
    pooled = torch.randn(300, 10, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(300, 77, device="cuda", dtype=torch.bfloat16)
    pw = torch.randn(10, 77, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(300, device="cuda", dtype=torch.bfloat16)
    args = (7, -1.5, 70, [True, True, True])
    got = torch.ops.fusedops.avgpool_gelu_scale_max_backward(g, pooled, x, pw, *args)
    want = torch.ops.fusedops.avgpool_gelu_scale_max_backward(g.cpu(), pooled.cpu(), x.cpu(),
                                                              pw.cpu(), *args)
    torch.cuda.synchronize()
    ok = all(torch.allclose(a.cpu().double(), e.double(), atol=5e-2, rtol=5e-2)
             for a, e in zip(got, want))
    print(f"98 backward helper bfloat16: {'ok' if ok else 'MISMATCH'}")
    failures += not ok
    # The fold helpers have their own kernels.
    w = torch.randn(50, 77, device="cuda")
    b = torch.randn(50, device="cuda")
    wf, bf = torch.ops.fusedops.avgpool_fold_linear(w, b, 7)
    failures += not torch.allclose(wf, w[:49].reshape(7, 7, 77).mean(1), atol=1e-5)
    cs, bs = torch.ops.fusedops.sum_fold_linear(w, b)
    failures += not torch.allclose(cs, w.sum(0), atol=1e-4)
    torch.cuda.synchronize()
    print("sanitizer workload:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
