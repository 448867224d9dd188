"""The numerical building blocks of the encoders: tight frames, fast Walsh–Hadamard transforms,
Kashin representations and SSTQ's quantizer codebooks.

None of these is an encoder; they are shared by several encoders (SSTQ, SQKR, PrivUnit-MRC) and
by the benchmarks that measure them, which is why they live under ``sstq_fl.encoders``.  Each is
imported by its module path (``sstq_fl.encoders.maths.kashin``, ...); this package re-exports
nothing.
"""
