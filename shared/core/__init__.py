"""What both stacks run, framework-neutral: the canonical weights and their leaf rules, Adam's canonical state,
the named intermediate tensors, teacher-forcing schedules and the input checks."""
