"""HTTP routes of the API."""
