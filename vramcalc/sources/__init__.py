"""Model sources: a model by the name the user has (a path, a catalog name, the local Hugging Face cache,
a Hub id), read from its files' headers."""
