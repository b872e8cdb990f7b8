"""Studies beyond the paper's figures, one folder each (a vertical slice: computation, result
files, rule step, claim rows, table and figure). See docs/architecture.md."""
