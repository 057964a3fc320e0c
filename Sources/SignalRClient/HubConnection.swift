import Foundation
internal import RealtimeCore
import Logging
internal import SignalRHub

/// SwiftSignalRClient's lifecycle delegate. The connection holds it weakly; its calls come on the
/// connection's callback queue (``HubConnectionOptions/callbackQueue``, `.main` by default).
public protocol HubConnectionDelegate: AnyObject {
    /// The connection opened (negotiate, transport and handshake done).
    func connectionDidOpen(hubConnection: HubConnection)
    /// `start()` failed (with ``HubConnectionBuilder/withAutoReconnect(reconnectPolicy:)``: once
    /// the policy gave up).
    func connectionDidFailToOpen(error: any Error)
    /// The connection closed: nil after `stop()`, the error otherwise.
    func connectionDidClose(error: (any Error)?)
    /// The connection was lost and reconnecting begins.
    func connectionWillReconnect(error: any Error)
    /// A reconnect succeeded.
    func connectionDidReconnect()
}

extension HubConnectionDelegate {
    /// Does nothing unless the delegate implements it.
    public func connectionWillReconnect(error: any Error) {}
    /// Does nothing unless the delegate implements it.
    public func connectionDidReconnect() {}
}

/// Reads a server invocation's arguments one at a time, in order.
public final class ArgumentExtractor {
    private let arguments: [JSONValue]
    private var index = 0

    init(arguments: [JSONValue]) { self.arguments = arguments }

    /// The next argument as `type`; throws when it does not decode or none is left.
    public func getArgument<T: Decodable>(type: T.Type) throws -> T {
        guard index < arguments.count else {
            throw SignalRError.invalidOperation(message: "No arguments left: the invocation has \(arguments.count).")
        }
        defer { index += 1 }
        do {
            return try HubValueCoding.decode(arguments[index], as: T.self)
        } catch {
            throw SignalRError.serializationError(underlyingError: error)
        }
    }

    /// Whether an argument is left to read.
    public func hasMoreArgs() -> Bool { index < arguments.count }
}

/// The official client's connection states.
public enum HubConnectionState: Sendable {
    case Stopped
    case Connecting
    case Connected
    case Reconnecting
}

/// The official client's server-to-client stream.
public protocol StreamResult<Element> {
    associatedtype Element
    /// The items; ends with the server's completion, throws its error, or
    /// ``SignalRError/streamCancelled`` after ``cancel()``.
    var stream: AsyncThrowingStream<Element, any Error> { get }
    /// Asks the server to stop the stream.
    func cancel() async
}

/// The stream ``HubConnection/stream(method:arguments:)`` returns.
final class StreamResultBox<Element>: StreamResult, @unchecked Sendable {
    // @unchecked Sendable: `stream` is set once at init; `cancelled` is behind a lock.
    let stream: AsyncThrowingStream<Element, any Error>
    private let raw: HubRawStream
    private let continuation: AsyncThrowingStream<Element, any Error>.Continuation

    init(raw: HubRawStream, decode: HandOff<(JSONValue) throws -> Element>) {
        self.raw = raw
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Element.self)
        self.stream = stream
        self.continuation = continuation
        let output = HandOff(continuation)
        background {
            do {
                for try await value in raw { output.value.yield(try decode.value(value)) }
                output.value.finish()
            } catch {
                output.value.finish(throwing: HubConnection.dotnetError(error))
            }
        }
    }

    func cancel() async {
        continuation.finish(throwing: SignalRError.streamCancelled)
        await raw.cancel()
    }
}

/// A server-to-client stream started with a callback `stream(...)`: give it to
/// ``HubConnection/cancelStreamInvocation(streamHandle:cancelDidFail:)``.
public final class StreamHandle: Sendable {
    /// The stream, once it started; `cancelled` when cancelled before that.
    let state = Locked<(raw: HubRawStream?, cancelled: Bool, valid: Bool)>((nil, false, true))
    init() {}
}

/// A hub connection with both libraries' APIs: SwiftSignalRClient's callbacks (synchronous
/// `start()` and `stop()`, `on(method:callback:)`, `invoke`/`send`/`stream` with completions, a
/// delegate), each called on ``HubConnectionOptions/callbackQueue`` (`.main` by default), and the
/// official client's async calls (`try await start()`, `on(_:handler:)`, `invoke`/`send`/`stream`
/// async, `onClosed`/`onReconnecting`/`onReconnected`, `state()`).
///
/// Not an actor: `await` on its synchronous members compiles (with a warning in the caller's
/// code). One handler per method name (registering again replaces it); names are matched
/// case-sensitively, as in both originals.
public final class HubConnection: @unchecked Sendable {
    // @unchecked Sendable: `base` is Sendable; the delegate and the start-retry state are behind
    // locks; the app's closures are called only on `callbackQueue` or one at a time from the
    // connection's handler task.
    let base: SignalRHub.HubConnection
    let callbackQueue: DispatchQueue
    private let reconnectPolicy: HandOff<any ReconnectPolicy>?
    private let delegateRef: Locked<WeakDelegate>
    private let starting = Locked<(retrying: Bool, stopRequested: Bool)>((false, false))
    private let unsupported: (any Error)?
    let gate = ReportGate()
    let handlers = HandlerTable()
    private let reconnecting: ReconnectingHandlers

    /// The lifecycle delegate, held weakly.
    public var delegate: (any HubConnectionDelegate)? {
        get { delegateRef.withLock { $0.value } }
        set { delegateRef.withLock { $0.value = newValue } }
    }

    /// The id from negotiate while connected; nil before, after the transport closed, or when
    /// negotiation was skipped.
    public var connectionId: String? {
        base.currentState == .connected ? base.connectionId : nil
    }

    /// A hub connection over `connection` (an ``HttpConnection``; another ``Connection`` type
    /// fails to open with ``SignalRError/invalidOperation(message:)``). `hubProtocol` chooses JSON
    /// or MessagePack by its name.
    public convenience init(connection: any Connection, hubProtocol: any HubProtocol, logger: any Logger = NullLogger()) {
        self.init(connection: connection, hubProtocol: hubProtocol, hubConnectionOptions: HubConnectionOptions(), logger: logger)
    }

    /// ``init(connection:hubProtocol:logger:)`` with hub options (keep-alive, callback queue).
    public init(connection: any Connection, hubProtocol: any HubProtocol, hubConnectionOptions: HubConnectionOptions, logger: any Logger = NullLogger()) {
        let http = connection as? HttpConnection
        let builder = HubConnectionBuilder(url: http?.url ?? URL(fileURLWithPath: "/"))
        if let http { builder.httpOptions = http.options }
        builder.hubOptions = hubConnectionOptions
        builder.moozzykLogger = (logger, .debug)
        builder.protocolName = hubProtocol.name
        let parts = builder.parts()
        self.base = parts.base
        self.callbackQueue = hubConnectionOptions.callbackQueue
        self.reconnectPolicy = nil
        self.delegateRef = parts.delegate
        self.reconnecting = parts.reconnecting
        self.unsupported = http == nil ? SignalRError.invalidOperation(message: "HubConnection runs this package's transports: pass an HttpConnection or use HubConnectionBuilder") : nil
        parts.observer.owner.withLock { $0 = WeakOwner(self) }
    }

    init(parts: HubConnectionBuilder.Parts, callbackQueue: DispatchQueue, reconnectPolicy: (any ReconnectPolicy)?) {
        self.base = parts.base
        self.callbackQueue = callbackQueue
        self.reconnectPolicy = reconnectPolicy.map(HandOff.init)
        self.delegateRef = parts.delegate
        self.reconnecting = parts.reconnecting
        self.unsupported = nil
        parts.observer.owner.withLock { $0 = WeakOwner(self) }
    }

    var logger: Logging.Logger { base.logger }

    // MARK: Start and stop

    /// SwiftSignalRClient's start: returns at once; the delegate hears `connectionDidOpen` or
    /// `connectionDidFailToOpen`. With ``HubConnectionBuilder/withAutoReconnect(reconnectPolicy:)``
    /// a failed start is tried again as the policy says before `connectionDidFailToOpen`.
    /// Starting a connection that is not stopped is ignored (logged). In async code
    /// `connection.start()` is the official client's async one: write `try await`.
    public func start() {
        if let unsupported {
            reportFailToOpen(unsupported)
            return
        }
        let began = Date()
        starting.withLock { $0 = (true, false) }
        background { [self] in
            var failed = 0
            while true {
                do {
                    try await base.start()
                    starting.withLock { $0.retrying = false }
                    return
                } catch {
                    if starting.withLock({ $0.stopRequested }) {
                        starting.withLock { $0.retrying = false }
                        reportClose(nil)
                        return
                    }
                    if (error as? RealtimeError)?.code == .refused {
                        logger.warning("start() called on a connection that is not stopped: ignored")
                        return
                    }
                    let context = RetryContext(failedAttemptsCount: failed, reconnectStartTime: began, error: error)
                    guard let policy = reconnectPolicy, let wait = policy.value.nextAttemptInterval(retryContext: context).seconds else {
                        starting.withLock { $0.retrying = false }
                        reportFailToOpen(error)
                        return
                    }
                    failed += 1
                    // Waits the reconnect policy's interval before the next start attempt.
                    try? await Task.sleep(for: .seconds(wait))
                    let stopped = starting.withLock { state -> Bool in
                        if state.stopRequested { state.retrying = false }
                        return state.stopRequested
                    }
                    if stopped {
                        reportClose(nil)
                        return
                    }
                }
            }
        }
    }

    /// The official client's start: negotiates, opens a transport and completes the handshake;
    /// throws ``SignalRError/invalidOperation(message:)`` unless stopped. A failed start is not
    /// retried and does not call `onClosed`.
    public func start() async throws {
        if let unsupported {
            reportFailToOpen(unsupported)
            throw unsupported
        }
        do {
            try await base.start()
        } catch {
            if (error as? RealtimeError)?.code != .refused { reportFailToOpen(error) }
            throw Self.dotnetError(error)
        }
    }

    /// SwiftSignalRClient's stop: returns at once; the delegate hears `connectionDidClose(error:
    /// nil)` and pending calls fail with ``SignalRError/hubInvocationCancelled``. In async code
    /// `connection.stop()` is the official client's async one: write `await`.
    public func stop() {
        // A start still trying (see start()) ends with connectionDidClose(error: nil) when it sees this.
        starting.withLock { $0.stopRequested = true }
        background { [base] in await base.stop() }
    }

    /// The official client's stop: returns once the connection closed and `onClosed` handlers ran.
    public func stop() async {
        await base.stop()
    }

    /// The official client's state.
    public func state() -> HubConnectionState {
        switch base.currentState {
        case .stopped: .Stopped
        case .connecting: .Connecting
        case .connected: .Connected
        case .reconnecting: .Reconnecting
        }
    }

    // MARK: Lifecycle reports

    func reportOpen() {
        let delegate = delegateRef
        gate.report(on: callbackQueue) { [weak self] in
            guard let self else { return }
            delegate.withLock { $0.value }?.connectionDidOpen(hubConnection: self)
        }
    }

    func reportFailToOpen(_ error: any Error) {
        let delegate = delegateRef
        let reported = Self.moozzykError(error)
        gate.report(on: callbackQueue) { delegate.withLock { $0.value }?.connectionDidFailToOpen(error: reported) }
    }

    func reportClose(_ error: (any Error)?) {
        let delegate = delegateRef
        // A server's Close message with an error reaches the delegate as SwiftSignalRClient's serverClose.
        var error = error
        if let closed = error as? RealtimeError, closed.code == .connectionClosed, let message = closed.serverMessage {
            error = SignalRError.serverClose(message: message)
        }
        gate.report(on: callbackQueue) { delegate.withLock { $0.value }?.connectionDidClose(error: error) }
    }

    func reportWillReconnect(_ error: any Error) {
        let delegate = delegateRef
        gate.report(on: callbackQueue) { delegate.withLock { $0.value }?.connectionWillReconnect(error: error) }
    }

    func reportDidReconnect() {
        let delegate = delegateRef
        gate.report(on: callbackQueue) { delegate.withLock { $0.value }?.connectionDidReconnect() }
    }

    // MARK: The official client's lifecycle handlers

    /// Called when the connection closes for good: nil after `stop()`, the error otherwise.
    /// Handlers are awaited in the order they were added.
    public func onClosed(handler: @escaping ((any Error)?) async -> Void) {
        let box = HandOff(handler)
        base.onClosed { error in await box.value(error.map(Self.dotnetError)) }
    }

    /// Called before every reconnect attempt: first with the error that lost the connection, then
    /// with the previous attempt's. Handlers are awaited in the order they were added.
    public func onReconnecting(handler: @escaping ((any Error)?) async -> Void) {
        reconnecting.add(handler)
    }

    /// Called after a reconnect succeeded.
    public func onReconnected(handler: @escaping () async -> Void) {
        let box = HandOff(handler)
        base.onReconnected { await box.value() }
    }

    // MARK: Errors

    /// SwiftSignalRClient's errors for this package's.
    static func moozzykError(_ error: any Error) -> any Error {
        if let error = error as? HubInvocationError { return SignalRError.hubInvocationError(message: error.message) }
        if let error = error as? RealtimeError {
            switch error.code {
            case .notConnected: return SignalRError.invalidOperation(message: "Attempting to send data before connection has been started.")
            case .cancelled: return SignalRError.hubInvocationCancelled
            default: return error
            }
        }
        return error
    }

    /// The official client's errors for this package's.
    static func dotnetError(_ error: any Error) -> any Error {
        if let error = error as? HubInvocationError { return SignalRError.invocationError(error.message) }
        if let error = error as? RealtimeError {
            switch error.code {
            case .notConnected: return SignalRError.invalidOperation(message: "Send is not allowed when the connection is not connected.")
            case .refused: return SignalRError.invalidOperation(message: "Start client while not in a stopped state.")
            default: return error
            }
        }
        return error
    }
}

/// The client methods' handlers by their exact names.
final class HandlerTable: Sendable {
    struct Entry {
        let run: ([JSONValue]) async throws -> JSONValue?
        let returnsResult: Bool
    }

    private let entries = Locked<[String: HandOff<Entry>]>([:])

    /// Sets the handler of `name`; true when it replaced one.
    func set(_ name: String, _ entry: Entry) -> Bool {
        entries.withLock { $0.updateValue(HandOff(entry), forKey: name) != nil }
    }

    func remove(_ name: String) {
        _ = entries.withLock { $0.removeValue(forKey: name) }
    }

    func entry(_ name: String) -> HandOff<Entry>? {
        entries.withLock { $0[name] }
    }
}

/// The official client's `onReconnecting` handlers, awaited in order before each reconnect attempt.
final class ReconnectingHandlers: Sendable {
    private let handlers = Locked<[HandOff<((any Error)?) async -> Void>]>([])

    func add(_ handler: @escaping ((any Error)?) async -> Void) {
        handlers.withLock { $0.append(HandOff(handler)) }
    }

    func run(_ error: any Error) async {
        for handler in handlers.withLock({ $0 }) { await handler.value(error) }
    }
}

/// Holds the delegate weakly.
struct WeakDelegate {
    weak var value: (any HubConnectionDelegate)?
}

/// Holds the compat connection weakly, for the base connection's lifecycle observer.
struct WeakOwner {
    weak var value: HubConnection?
    init(_ value: HubConnection?) { self.value = value }
}

/// Hears the base connection's lifecycle and hands it to the compat connection, which reports to
/// the delegate on its callback queue.
final class LifecycleForwarder: HubLifecycleObserver {
    let owner = Locked(WeakOwner(nil))

    private var connection: HubConnection? { owner.withLock { $0.value } }

    func didOpen(_ connection: SignalRHub.HubConnection) { self.connection?.reportOpen() }
    func didFailToOpen(_ error: any Error) {}  // reported by start(), after the reconnect policy's retries
    func didClose(_ error: (any Error)?) { connection?.reportClose(error) }
    func willReconnect(_ error: any Error) { connection?.reportWillReconnect(error) }
    func didReconnect() { connection?.reportDidReconnect() }
}
