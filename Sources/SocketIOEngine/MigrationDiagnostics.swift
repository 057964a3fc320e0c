public import Foundation

// socket.io-client-swift's spellings, declared unavailable so that code ported without the
// SocketIO import gets an error naming the module and the product to add, in place of
// "extra argument 'config'" or "cannot convert URL to String". Nothing here can be called.
//
// With `import SocketIO` instead, none of this is seen: the SocketIO module declares the original's
// types itself and does not re-export this module. Tests/SocketIOCompatTests/MigrationDiagnosticsTests
// compiles each spelling both ways. The messages are string literals (the attribute takes no
// expressions), so each repeats the instruction.
//
// `connect()` has no unavailable twin: SocketIOClient has an async `connect()`, and the compiler
// ranks any unavailable declaration below it, so synchronous code without the import gets
// "'async' call in a function that does not support concurrency". (SocketIO's `connect()` is the
// original's synchronous one, in synchronous and async code alike.)

/// socket.io-client-swift's option type; it is in SocketIO.
@_documentation(visibility: internal)
@available(*, unavailable, message: "SocketIOClientOption is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO")
public enum SocketIOClientOption {
    case log(Bool), compress, connectParams([String: Any]), extraHeaders([String: String])
    case reconnects(Bool), reconnectAttempts(Int), reconnectWait(Int), reconnectWaitMax(Int)
    case randomizationFactor(Double), forceWebsockets(Bool), forcePolling(Bool), forceNew(Bool)
    case path(String), secure(Bool), selfSigned(Bool), version(SocketIOVersionOption)
}

/// socket.io-client-swift's version option; it is in SocketIO.
@_documentation(visibility: internal)
@available(*, unavailable, message: "SocketIOVersionOption is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, set SocketIOConfiguration.version")
public enum SocketIOVersionOption { case two, three }

/// socket.io-client-swift's configuration list; it is in SocketIO.
@_documentation(visibility: internal)
@available(*, unavailable, message: "SocketIOClientConfiguration is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use SocketIOConfiguration")
public struct SocketIOClientConfiguration {}

/// socket.io-client-swift's ack answerer; it is in SocketIO.
@_documentation(visibility: internal)
@available(*, unavailable, message: "SocketAckEmitter is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, answer with SocketIOEvent.ack(arguments:)")
public final class SocketAckEmitter {
    public func with(_ items: any SocketData...) { fatalError("unavailable") }
    public func with(_ items: [Any]) { fatalError("unavailable") }
}

/// socket.io-client-swift's pending ack; it is in SocketIO.
@_documentation(visibility: internal)
@available(*, unavailable, message: "OnAckCallback is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try await socket.emitWithAck(_:arguments:)")
public final class OnAckCallback {
    public func timingOut(after seconds: Double, callback: @escaping @Sendable ([Any]) -> Void) { fatalError("unavailable") }
}

extension SocketManager {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "SocketManager(socketURL:config:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use SocketManager(url:configuration:)")
    public convenience init(socketURL: URL, config: [SocketIOClientOption] = []) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "SocketManager(socketURL:config:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use SocketManager(url:configuration:)")
    public convenience init(socketURL: URL, config: [String: Any]) { fatalError("unavailable") }
}

extension SocketIOClient {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "on(_:callback:) with (data, ack) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use on(_:handler:) or events(_:)")
    @discardableResult
    public func on(_ event: String, callback: @escaping @Sendable ([Any], SocketAckEmitter) -> Void) -> UUID { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "once(_:callback:) with (data, ack) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use once(_:handler:)")
    @discardableResult
    public func once(_ event: String, callback: @escaping @Sendable ([Any], SocketAckEmitter) -> Void) -> UUID { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "on(clientEvent:callback:) with (data, ack) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use on(clientEvent:handler:)")
    @discardableResult
    public func on(clientEvent event: SocketClientEvent, callback: @escaping @Sendable ([Any], SocketAckEmitter) -> Void) -> UUID { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "connect(withPayload:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try await connect(auth:)")
    public func connect(withPayload payload: [String: Any]?) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "connect(withPayload:timeoutAfter:withHandler:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try await connect(auth:timeout:)")
    public func connect(withPayload payload: [String: Any]? = nil, timeoutAfter: Double, withHandler handler: (@Sendable () -> Void)?) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "emit(_:_:) with values listed is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try emit(_:arguments:)")
    public func emit(_ event: String, _ items: any SocketData..., completion: (@Sendable () -> Void)? = nil) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "emit(_:with:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try emit(_:arguments:)")
    public func emit(_ event: String, with items: [Any], completion: (@Sendable () -> Void)? = nil) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "emitWithAck(_:_:) with timingOut(after:callback:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try await emitWithAck(_:arguments:)")
    public func emitWithAck(_ event: String, _ items: any SocketData...) -> OnAckCallback { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "emitWithAck(_:with:) is in SocketIO: add the product SocketIO (package swift-realtime) to the target's dependencies and import SocketIO; with SocketIOEngine alone, use try await emitWithAck(_:arguments:)")
    public func emitWithAck(_ event: String, with items: [Any]) -> OnAckCallback { fatalError("unavailable") }
}
