from sender.main import main

raise SystemExit(main())
