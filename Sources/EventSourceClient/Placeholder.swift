enum _PlaceholderEventSourceClient {}
