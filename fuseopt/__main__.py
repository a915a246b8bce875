import sys

from .tools.command import main

sys.exit(main())
