"""Where the Kashin stage's time goes on one device: ``sstq-flat:b=4`` at d = 25,450, float32 inputs.

Usage: ``PYTHONPATH=. python benchmarks/gpu_kashin_profile.py [DEVICE] [CLIENTS]`` (default ``cuda 1000``).
Prints the Kashin passes per row, the Kashin call in the frame's row chunks and in one batch, one frame product,
a whole encode (in one batch) and a ``torch.profiler`` table of one Kashin call.  Medians of 5 after a warm-up
(``sstq_fl.bench.speed.timeit``).
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from sstq_fl.bench.speed import client_inputs, timeit
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.maths.kashin import kashin


def main(dev: str, n: int) -> None:
    enc = make_encoder("sstq-flat:b=4", 25450, 3.0, radius=1.0, device=dev)
    frame, cfg = enc.frame, enc.kashin_cfg
    x, j = client_inputs(n, 25450, dev), torch.randint(0, frame.N, (n, 1), device=dev)
    print("passes per row (histogram)", torch.bincount(kashin(frame, x, cfg, j).passes.cpu()).tolist())
    print("kashin in row chunks of", frame.row_chunk(x.dtype), "s", round(timeit(lambda: kashin(frame, x, cfg, j), 5), 4))
    chunk = frame.row_chunk
    frame.row_chunk = lambda dtype: None  # type: ignore[method-assign]
    print("kashin in one batch s", round(timeit(lambda: kashin(frame, x, cfg, j), 5), 4))
    buf = torch.empty(n, frame.N, device=dev)
    print("one frame product s", round(timeit(lambda: frame.coef(x, buf), 5), 5))
    ids = list(range(n))
    print("encode (one batch) s", round(timeit(lambda: enc.encode(x, ids, coins=ids), 5), 4))
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        kashin(frame, x, cfg, j)
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
    frame.row_chunk = chunk  # type: ignore[method-assign]
    key = "cuda_time_total" if dev.startswith("cuda") else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=18, max_name_column_width=40))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cuda", int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
