public import Foundation

// IKEventSource's spellings, declared unavailable so that code ported without the IKEventSource
// import gets an error naming the module and the product to add, in place of "missing argument for
// parameter 'configuration'" or "'connect' is inaccessible". Nothing here can be called. The
// IKEventSource module has its own EventSource class with these members (a file importing both
// modules writes IKEventSource.EventSource). Tests/SocketIOCompatTests/MigrationDiagnosticsTests
// compiles each spelling both ways. The messages are string literals, so each repeats the
// instruction.

extension EventSource {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "EventSource(url:headers:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, use EventSource(url:configuration:)")
    public convenience init(url: URL, headers: [String: String] = [:]) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "retryTime is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, read reconnectionTime")
    public var retryTime: Int { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "connect(lastEventId:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, iterate events or call try await run()")
    public func connect(lastEventId: String? = nil) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "disconnect() is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, call close()")
    public func disconnect() { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "onOpen(_:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, iterate updates")
    public func onOpen(_ onOpenCallback: @escaping @Sendable () -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "onComplete(_:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, iterate updates")
    public func onComplete(_ onComplete: @escaping @Sendable (Int?, Bool?, NSError?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "onMessage(_:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, iterate events")
    public func onMessage(_ onMessageCallback: @escaping @Sendable (_ id: String?, _ event: String?, _ data: String?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "addEventListener(_:handler:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, iterate events and switch on the type")
    public func addEventListener(_ event: String, handler: @escaping @Sendable (_ id: String?, _ event: String?, _ data: String?) -> Void) { fatalError("unavailable") }

    @_documentation(visibility: internal)
    @available(*, unavailable, message: "removeEventListener(_:) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource")
    public func removeEventListener(_ event: String) { fatalError("unavailable") }
}

extension EventSourceEvents {
    @_documentation(visibility: internal)
    @available(*, unavailable, message: "events() (the listened event types) is in IKEventSource: add the product IKEventSource (package swift-realtime) to the target's dependencies and import IKEventSource; with EventSourceClient alone, events is the event sequence")
    public func callAsFunction() -> [String] { fatalError("unavailable") }
}
