enum _PlaceholderSpreadbotClient {}
