enum _PlaceholderSocketIOEngine {}
