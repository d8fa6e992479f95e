from outbox_sweeper.main import main

raise SystemExit(main())
