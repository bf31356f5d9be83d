import sys

from metrics_sched.cli import main

sys.exit(main())
