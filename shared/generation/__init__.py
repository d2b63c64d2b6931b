"""Generation with Hugging Face's rules, framework-neutral: settings (GenerationConfig), processors, search."""
