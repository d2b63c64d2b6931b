"""The proof harness: deterministic fixtures and golden files, the equality policy, `rosetta equality`'s
measurements, and training equality (both stacks trained step for step)."""
