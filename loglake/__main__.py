from loglake.cli import main

raise SystemExit(main())
