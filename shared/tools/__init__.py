"""The suite's measurements and pages: `rosetta bench` (and the machine it runs on), training reproduction
summaries, and `rosetta report`."""
