enum _PlaceholderSignalRHub {}
