"""Planning: request → detection → plan. Pure: asks the hooks, touches no device and downloads
nothing. The request options and the concerns are each declared once (``options``, ``concerns``)."""
