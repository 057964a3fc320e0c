enum _PlaceholderRealtimeTesting {}
