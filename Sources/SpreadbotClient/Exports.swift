// Code that imports only SpreadbotClient gets the core's shared types (RealtimeError,
// RealtimeRuntime, TLSOptions, Reachability, BackoffPolicy) as well.
@_exported public import RealtimeCore
