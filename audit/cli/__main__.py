import sys

from audit.cli.main import main

sys.exit(main())
