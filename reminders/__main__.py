from reminders.cli import main

main()
