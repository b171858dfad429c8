import sys

from tilerosetta.cli import main

sys.exit(main())
