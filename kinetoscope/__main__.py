import sys

from kinetoscope.cli import main

sys.exit(main())
