"""`python -m shared.train.runner` as torchrun starts it, for tests/torch/test_distributed.py: with STOP_AFTER=k in the
environment the run is interrupted (KeyboardInterrupt, as Ctrl-C) after step k, its last checkpoint left behind."""

from __future__ import annotations

import os
import sys

from shared.train import runner

if __name__ == "__main__":
    stop_after = int(os.environ.get("STOP_AFTER", 0))
    if stop_after:
        after_step = runner._Steps.after_step

        def interrupted(self, loss):
            going_on = after_step(self, loss)
            if self.step == stop_after:
                raise KeyboardInterrupt
            return going_on

        runner._Steps.after_step = interrupted
    raise SystemExit(runner.main(sys.argv[1:]))
