import sys

from warden.cli import main

sys.exit(main())
