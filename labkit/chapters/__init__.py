"""One module per chapter: kernel wrappers (launch configuration, input checks) and the chapter's benchmarks."""
