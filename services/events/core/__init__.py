"""Pure decisions of the events gateway: filters, rights, cursors, the stream format, webhooks."""
