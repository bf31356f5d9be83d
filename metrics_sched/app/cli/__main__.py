import sys

from metrics_sched.app.cli import main

sys.exit(main())
