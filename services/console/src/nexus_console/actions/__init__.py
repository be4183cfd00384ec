"""What the console's buttons do: each action the same code path its CLI command takes."""
