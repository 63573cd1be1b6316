"""One module per subcommand: `add_parser(sub)` and `main(args)`."""
