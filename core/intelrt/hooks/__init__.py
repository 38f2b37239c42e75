"""The hook contract: pluggy markers, the hook specifications, and the types hooks take and return."""
