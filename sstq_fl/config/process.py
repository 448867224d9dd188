"""The process-wide settings an entry point applies at start-up (:func:`sstq_fl.process.apply_process_options`,
whose module says what each does and why): CLI flags before the sub-command, no run-config key."""

from __future__ import annotations

from dataclasses import dataclass

from .declare import Options, option


@dataclass(frozen=True)
class ProcessOptions(Options):
    """The process-wide settings of an entry point (module docstring); the defaults are the command line's."""

    omp_passive: bool = option(True, key="", help="OpenMP threads wait passively (OMP_WAIT_POLICY=PASSIVE unless the "
                               "environment sets it): spinning ones slow PyTorch down 10-25x beside another process")
    malloc_tuning: bool = option(True, key="", help="fix glibc's mmap threshold at 32 MiB and its trim threshold at "
                                 "1 GiB, so a round's temporaries are reused from the heap (glibc only)")
    ray_keep_devices: bool = option(True, key="", help="Ray leaves a worker's visible accelerators alone when its task "
                                    "asks for no GPU (RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0 unless the environment sets it)")
