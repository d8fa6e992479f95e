from reminder_api.main import main

raise SystemExit(main())
