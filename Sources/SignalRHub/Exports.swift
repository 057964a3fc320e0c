// SignalRHub's API speaks RealtimeCore's types (JSONValue, RealtimeError, TLSOptions,
// RealtimeRuntime); re-exported so `import SignalRHub` is all an app needs.
@_exported public import RealtimeCore
