public import Foundation

// The older Swift client's spellings (moozzyk/SignalR-Client-Swift), declared unavailable so that
// code ported without the SignalRClient import gets an error naming the module and the product to
// add, in place of "cannot convert URL to String". Nothing here can be called. SignalRClient
// declares its own types and does not re-export this module, so code importing SignalRClient alone
// never sees these placeholders. Tests/SocketIOCompatTests/MigrationDiagnosticsTests compiles each spelling
// both ways. The messages are string literals, so each repeats the instruction.
//
// `start()` and `stop()` have no unavailable twins: HubConnection's are async, and the compiler
// ranks any unavailable declaration below them, so synchronous code without the import gets
// "'async' call in a function that does not support concurrency" (SignalRClient's
// documentation says what that means).

/// The older client's lifecycle delegate; it is in SignalRClient.
@_documentation(visibility: internal)
@available(*, unavailable, message: "HubConnectionDelegate is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use onClosed, onReconnecting and onReconnected")
public protocol HubConnectionDelegate: AnyObject {}

/// The older client's HTTP options; it is in SignalRClient.
@_documentation(visibility: internal)
@available(*, unavailable, message: "HttpConnectionOptions is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use HubConnectionOptions")
public final class HttpConnectionOptions {}

/// The older client's HTTP client protocol; it is in SignalRClient.
@_documentation(visibility: internal)
@available(*, unavailable, message: "HttpClientProtocol is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient")
public protocol HttpClientProtocol {}

/// The older client's HTTP response; it is in SignalRClient.
@_documentation(visibility: internal)
@available(*, unavailable, message: "HttpResponse is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient")
public final class HttpResponse {}

/// The older client's argument reader; it is in SignalRClient.
@_documentation(visibility: internal)
@available(*, unavailable, message: "ArgumentExtractor is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, give the handler typed parameters")
public final class ArgumentExtractor {}

extension HubConnectionBuilder {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "HubConnectionBuilder(url:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use HubConnectionBuilder().withUrl(url:)")
    public init(url: URL) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "withLogging(minLogLevel:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use withLogLevel(logLevel:)")
    public func withLogging(minLogLevel: LogLevel) -> HubConnectionBuilder { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "withHubConnectionDelegate(delegate:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient")
    public func withHubConnectionDelegate(delegate: any HubConnectionDelegate) -> HubConnectionBuilder { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "withHttpConnectionOptions(configureHttpOptions:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use withUrl(url:options:)")
    public func withHttpConnectionOptions(configureHttpOptions: (HttpConnectionOptions) -> Void) -> HubConnectionBuilder { fatalError("unavailable") }
}

extension LogLevel {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "LogLevel.info is in SignalRClient: import SignalRClient (product SignalRClient), or write .information")
    public static var info: LogLevel { fatalError("unavailable") }
}

extension HubConnection {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "invoke(method:arguments:resultType:invocationDidComplete:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use try await invoke(method:arguments:)")
    public func invoke<T: Decodable>(method: String, arguments: [any Encodable], resultType: T.Type, invocationDidComplete: @escaping @Sendable (T?, (any Error)?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "invoke(method:_:resultType:invocationDidComplete:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use try await invoke(method:arguments:)")
    public func invoke<T: Decodable>(method: String, _ arguments: any Encodable..., resultType: T.Type, invocationDidComplete: @escaping @Sendable (T?, (any Error)?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "invoke(method:arguments:invocationDidComplete:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use try await invoke(method:arguments:)")
    public func invoke(method: String, arguments: [any Encodable], invocationDidComplete: @escaping @Sendable ((any Error)?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "invoke(method:_:invocationDidComplete:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use try await invoke(method:arguments:)")
    public func invoke(method: String, _ arguments: any Encodable..., invocationDidComplete: @escaping @Sendable ((any Error)?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "send(method:arguments:sendDidComplete:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use try await send(method:arguments:)")
    public func send(method: String, arguments: [any Encodable], sendDidComplete: @escaping @Sendable ((any Error)?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "send(method:_:sendDidComplete:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use try await send(method:arguments:)")
    public func send(method: String, _ arguments: any Encodable..., sendDidComplete: @escaping @Sendable ((any Error)?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "on(method:callback:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use on(_:handler:) with typed parameters")
    public func on(method: String, callback: @escaping @Sendable (ArgumentExtractor) throws -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "on(method:callback:) is in SignalRClient: add the product SignalRClient (package swift-realtime) to the target's dependencies and import SignalRClient; with SignalRHub alone, use on(_:handler:)")
    public func on<each Argument: Decodable>(method: String, callback: @escaping @Sendable (repeat each Argument) -> Void) { fatalError("unavailable") }
}
