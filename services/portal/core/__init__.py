"""The portal's pure decisions: sessions, CSRF, page rights, change detection."""
