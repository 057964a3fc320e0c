// `JSONValue` and its reader/writer live in RealtimeCore (SignalR's JSON protocol uses the same
// type). SocketIOEngine re-exports RealtimeCore, so code that imports only SocketIOEngine keeps
// `JSONValue` with all its members, as well as the shared types (RealtimeError, TLSOptions, ...).
@_exported public import RealtimeCore
