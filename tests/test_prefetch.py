"""``sstq_fl.prefetch``: the end-of-run imports start in one background thread, once per process."""

import subprocess
import sys


def _run(code: str, **env: str) -> None:
    import os

    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, **env}, timeout=120)


def test_a_trainer_loads_the_accountant_and_the_plots_in_the_background_once():
    _run("import sys\n"
         "from sstq_fl.prefetch import END_OF_RUN, prefetch\n"
         "assert 'dp_accounting' not in sys.modules and 'matplotlib' not in sys.modules\n"
         "t = prefetch()\n"
         "assert t is not None and t.daemon and prefetch() is t  # one thread per process\n"
         "t.join(60)\n"
         "assert not t.is_alive() and all(m in sys.modules for m in END_OF_RUN) and 'matplotlib' in sys.modules\n")


def test_sstq_fl_prefetch_0_leaves_every_import_where_it_is_used():
    _run("import sys\n"
         "from sstq_fl.prefetch import prefetch\n"
         "assert prefetch() is None and 'dp_accounting' not in sys.modules\n", SSTQ_FL_PREFETCH="0")


def test_a_module_that_fails_to_import_is_left_to_its_user():
    _run("from sstq_fl.prefetch import prefetch\n"
         "t = prefetch(('sstq_fl_no_such_module',))\n"
         "t.join(30)\n"
         "assert not t.is_alive()\n")
