"""Small facts every layer reads: installed versions, device-visibility lists, the launch
environment, the local hub cache, and the redaction of secrets."""
