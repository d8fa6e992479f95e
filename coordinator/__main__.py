from coordinator.main import main

raise SystemExit(main())
