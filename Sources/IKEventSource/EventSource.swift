public import Foundation
import EventSourceClient
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore

/// The state of an ``EventSource``, as IKEventSource names it.
///
/// ``EventSource/readyState`` is `.closed` from `init` until ``EventSource/connect(lastEventId:)``,
/// `.connecting` from then until a response head arrives, `.open` from then on, and `.closed`
/// again after ``EventSource/disconnect()``. As in IKEventSource, the end of a connection does not
/// change it: inside `onComplete` after the server ended the stream it is still `.open`.
public enum EventSourceState: Sendable {
    /// `connect()` was called; no response yet.
    case connecting
    /// A response head arrived.
    case open
    /// Not connected: before the first `connect()`, and after `disconnect()`.
    case closed
}

/// What an IKEventSource event source offers: ``EventSource`` conforms, and apps use the protocol
/// for their own test doubles.
public protocol EventSourceProtocol {
    /// The headers every request sends.
    var headers: [String: String] { get }
    /// The reconnection time in milliseconds the server asked for with `retry:` (3000 by default).
    var retryTime: Int { get }
    /// The stream's URL.
    var url: URL { get }
    /// The ID of the last event received, if it had one.
    var lastEventId: String? { get }
    /// The current state.
    var readyState: EventSourceState { get }
    /// Connects, sending `lastEventId` as `Last-Event-Id` when it is not nil.
    func connect(lastEventId: String?)
    /// Ends the connection.
    func disconnect()
    /// The event names that have a listener.
    func events() -> [String]
    /// Sets the callback for each response head.
    func onOpen(_ onOpenCallback: @escaping (() -> Void))
    /// Sets the callback for the end of each connection: the HTTP status, whether to reconnect,
    /// the error.
    func onComplete(_ onComplete: @escaping ((Int?, Bool?, NSError?) -> Void))
    /// Sets the callback for events without a name or named `message`.
    func onMessage(_ onMessageCallback: @escaping ((_ id: String?, _ event: String?, _ data: String?) -> Void))
    /// Sets the handler of the events named `event`.
    func addEventListener(_ event: String, handler: @escaping ((_ id: String?, _ event: String?, _ data: String?) -> Void))
    /// Removes the handler of the events named `event`.
    func removeEventListener(_ event: String)
}

/// A Server-Sent Events source with IKEventSource's API and behaviour, over
/// EventSourceClient's connection.
///
/// ```swift
/// let source = EventSource(url: url, headers: ["Authorization": "Bearer token"])
/// source.onMessage { id, event, data in print(data ?? "") }
/// source.onComplete { [weak source] status, reconnect, error in
///     if reconnect ?? false { source?.connect() }
/// }
/// source.connect()
/// ```
/// Nothing connects until ``connect(lastEventId:)``, and nothing reconnects by itself: when the
/// connection ends, `onComplete` says why and the app calls `connect()` again (from `onComplete`
/// too). The callbacks are called on the main queue, one at a time and in the order things
/// happened, never inside the call that caused them (on Linux the main queue runs only while the
/// main thread is in `dispatchMain()` or `RunLoop.main`; until then the callbacks wait in the
/// queue). ``init(url:headers:callbackQueue:)`` takes another serial queue.
///
/// Unlike IKEventSource's, the source is `Sendable`: every member may be used from any thread.
// @unchecked Sendable: `url`, `headers` and `callbackQueue` are constants and everything that
// changes is in `core`, under its lock; the app's closures are only called on `callbackQueue`.
open class EventSource: NSObject, EventSourceProtocol, @unchecked Sendable {
    /// The stream's URL, as given to `init`.
    public let url: URL
    /// The headers every request sends (with `Accept: text/event-stream` and
    /// `Cache-Control: no-cache`).
    public let headers: [String: String]
    /// The queue the callbacks are called on: the main queue unless `init` was given another.
    public let callbackQueue: DispatchQueue
    private let core: Core

    /// A source of `url` that sends `headers`; it does not connect until ``connect(lastEventId:)``.
    /// Callbacks are called on the main queue.
    public init(url: URL, headers: [String: String] = [:]) {
        self.url = url
        self.headers = headers
        self.callbackQueue = .main
        self.core = Core(queue: .main)
        super.init()
    }

    /// A source whose callbacks are called on `callbackQueue` (a serial queue) in place of the
    /// main queue.
    public init(url: URL, headers: [String: String] = [:], callbackQueue: DispatchQueue) {
        self.url = url
        self.headers = headers
        self.callbackQueue = callbackQueue
        self.core = Core(queue: callbackQueue)
        super.init()
    }

    deinit {
        // As IKEventSource (whose queued callbacks hold the source weakly): nothing is called
        // after the source is gone.
        core.release()?.close()
    }

    /// The reconnection time in milliseconds: 3000 until the server sends `retry:`.
    public var retryTime: Int { core.state.withLockedValue { $0.retryTime } }

    /// The ID of the last event received (nil before the first event with an ID). Not set by
    /// `connect(lastEventId:)`: keep the ID and pass it when reconnecting.
    public var lastEventId: String? { core.state.withLockedValue { $0.lastEventId } }

    /// `.closed` until ``connect(lastEventId:)``, then `.connecting`, `.open` once a response head
    /// arrived, `.closed` after ``disconnect()``; the end of a connection leaves it as it was.
    public var readyState: EventSourceState { core.state.withLockedValue { $0.readyState } }

    /// Connects, sending `lastEventId` as `Last-Event-Id` when it is not nil; returns at once.
    /// Each call makes a new connection (from `onComplete` too); one still open is closed first,
    /// without its `onComplete`.
    public func connect(lastEventId: String? = nil) {
        var httpHeaders = HTTPHeaders()
        for (name, value) in headers { httpHeaders.add(name: name, value: value) }
        // Sent as a header, not as the connection's starting ID: the events' IDs are the stream's own.
        if let lastEventId { httpHeaders.replaceOrAdd(name: "Last-Event-Id", value: lastEventId) }
        var configuration = EventSourceConfiguration(
            headers: httpHeaders, maxReconnectAttempts: 0, idleTimeout: nil,
            reachability: AlwaysReachable())
        configuration.shouldRetry = { _ in false }
        let inner = EventSourceClient.EventSource(url: url, configuration: configuration)
        let (previous, generation) = core.state.withLockedValue { state in
            state.generation += 1
            state.readyState = .connecting
            defer { state.inner = inner }
            return (state.inner, state.generation)
        }
        previous?.close()
        inner.observe(unnamedEventType: "") { [core] observation in
            core.handle(observation, generation: generation)
        }
        inner.startConnecting()
    }

    /// Ends the connection: `readyState` is `.closed` at once, and `onComplete` follows on the
    /// callback queue (with the status when a response had come, else the cancellation error).
    public func disconnect() {
        let inner = core.state.withLockedValue { state in
            state.readyState = .closed
            return state.inner
        }
        inner?.close()
    }

    /// Sets the callback for each response head (a later call replaces it).
    public func onOpen(_ onOpenCallback: @escaping (() -> Void)) {
        core.state.withLockedValue { $0.handlers.onOpen = onOpenCallback }
    }

    /// Sets the callback for the end of each connection (a later call replaces it): the HTTP
    /// status and IKEventSource's reconnect advice (true only for a 2xx status other than 200),
    /// with no error; or, when no response came, nil, nil and the error (in `NSURLErrorDomain`:
    /// `NSURLErrorCannotConnectToHost`, `NSURLErrorTimedOut`, `NSURLErrorCancelled` after
    /// ``disconnect()``...).
    public func onComplete(_ onComplete: @escaping ((Int?, Bool?, NSError?) -> Void)) {
        core.state.withLockedValue { $0.handlers.onComplete = onComplete }
    }

    /// Sets the callback for events without an `event:` name or named `message` (a later call
    /// replaces it); `event` is always "message".
    public func onMessage(_ onMessageCallback: @escaping ((_ id: String?, _ event: String?, _ data: String?) -> Void)) {
        core.state.withLockedValue { $0.handlers.onMessage = onMessageCallback }
    }

    /// Sets the handler of the events whose `event:` field is exactly `event` (one per name; a
    /// later call replaces it). A listener of "message" gets only events with `event: message`,
    /// after `onMessage`.
    public func addEventListener(_ event: String, handler: @escaping ((_ id: String?, _ event: String?, _ data: String?) -> Void)) {
        core.state.withLockedValue { $0.handlers.listeners[event] = Listener(call: handler) }
    }

    /// Removes the handler of `event`, if any.
    public func removeEventListener(_ event: String) {
        core.state.withLockedValue { _ = $0.handlers.listeners.removeValue(forKey: event) }
    }

    /// The event names that have a listener (sorted).
    public func events() -> [String] {
        core.state.withLockedValue { $0.handlers.listeners.keys.sorted() }
    }

    // IKEventSource's source is its URLSession's delegate; this one has no URLSession.

    /// Not carried: the connection does not use URLSession.
    @available(*, unavailable, message: "the connection does not use URLSession: use onMessage and addEventListener for the events")
    open func urlSession<Session, Task>(_ session: Session, dataTask: Task, didReceive data: Data) {}

    /// Not carried: the connection does not use URLSession.
    @available(*, unavailable, message: "the connection does not use URLSession: use onOpen for the response head")
    open func urlSession<Session, Task, Response, Disposition>(
        _ session: Session, dataTask: Task, didReceive response: Response, completionHandler: @escaping (Disposition) -> Void
    ) {}

    /// Not carried: the connection does not use URLSession.
    @available(*, unavailable, message: "the connection does not use URLSession: use onComplete for the end of a connection")
    open func urlSession<Session, Task>(_ session: Session, task: Task, didCompleteWithError error: (any Error)?) {}

    /// Not carried: the connection does not use URLSession.
    @available(*, unavailable, message: "the connection does not use URLSession: redirects are followed with the headers (Authorization and Cookie only to the same origin)")
    open func urlSession<Session, Task, Response, Request>(
        _ session: Session, task: Task, willPerformHTTPRedirection response: Response, newRequest request: Request,
        completionHandler: @escaping (Request?) -> Void
    ) {}
}

/// The app's callbacks, as IKEventSource keeps them.
// @unchecked Sendable: the closures are stored and read only under the source's lock and called
// only on the source's callback queue (one serial queue, the main queue by default), as
// IKEventSource calls its callbacks on one queue; they are never called concurrently.
struct Handlers: @unchecked Sendable {
    var onOpen: (() -> Void)?
    var onComplete: ((Int?, Bool?, NSError?) -> Void)?
    var onMessage: ((_ id: String?, _ event: String?, _ data: String?) -> Void)?
    var listeners: [String: Listener] = [:]
}

/// One event listener, carried to the callback queue.
// @unchecked Sendable: as Handlers: read under the source's lock, called only on the callback queue.
struct Listener: @unchecked Sendable {
    let call: (_ id: String?, _ event: String?, _ data: String?) -> Void
}

/// What the source and its connection's observer share.
final class Core: Sendable {
    struct State: Sendable {
        var readyState: EventSourceState = .closed
        var lastEventId: String?
        var retryTime = 3000
        /// Counts `connect()` calls: what a replaced connection says is ignored.
        var generation = 0
        var inner: EventSourceClient.EventSource?
        var handlers = Handlers()
        /// False once the source is gone: queued callbacks are skipped.
        var alive = true
    }

    let state = NIOLockedValueBox(State())
    let queue: DispatchQueue

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// The source is gone: returns the connection to close, let go here (it holds this core in
    /// its observer, so keeping it would keep both).
    func release() -> EventSourceClient.EventSource? {
        state.withLockedValue { state in
            state.alive = false
            state.generation += 1
            defer { state.inner = nil }
            return state.inner
        }
    }

    /// The live handlers, or nil once the source is gone.
    private var handlers: Handlers? {
        state.withLockedValue { $0.alive ? $0.handlers : nil }
    }

    /// What the connection of `connect()` number `generation` did (on its event loop): the state
    /// changes now, the callbacks on the queue.
    func handle(_ observation: EventSourceClient.EventSource.Observation, generation: Int) {
        switch observation {
        case .open:
            let current = state.withLockedValue { state -> Bool in
                guard state.generation == generation, state.readyState == .connecting else { return false }
                state.readyState = .open
                return true
            }
            if current { queue.async { self.handlers?.onOpen?() } }
        case .event(let event):
            let listener = state.withLockedValue { state -> Listener?? in
                guard state.generation == generation else { return .none }
                state.lastEventId = event.lastEventId.isEmpty ? nil : event.lastEventId
                if let inner = state.inner {
                    let time = inner.reconnectionTime.components
                    state.retryTime = Int(time.seconds * 1000 + time.attoseconds / 1_000_000_000_000_000)
                }
                return .some(event.type.isEmpty ? nil : state.handlers.listeners[event.type])
            }
            guard case .some(let listener) = listener else { return }
            let id: String? = event.lastEventId.isEmpty ? nil : event.lastEventId
            let name = event.type
            let data = event.data
            queue.async {
                guard let handlers = self.handlers else { return }
                if name.isEmpty || name == "message" { handlers.onMessage?(id, "message", data) }
                listener?.call(id, name, data)
            }
        case .complete(let status, let error):
            // A response of any status counts as an open (IKEventSource opens on every response
            // head); the connection reports only 200 with text/event-stream as one.
            let openFirst = state.withLockedValue { state -> Bool? in
                guard state.generation == generation else { return nil }
                guard status != nil, state.readyState == .connecting else { return false }
                state.readyState = .open
                return true
            }
            guard let openFirst else { return }
            let arguments: (Int?, Bool?, NSError?)
            if let status {
                arguments = (status, Self.shouldReconnect(status: status), nil)
            } else {
                arguments = (nil, nil, Self.urlError(error))
            }
            let (status, reconnect, nsError) = arguments
            // NSError is not Sendable; this one is made here and only read on the queue.
            let box = HandOff(nsError)
            queue.async {
                guard let handlers = self.handlers else { return }
                if openFirst { handlers.onOpen?() }
                handlers.onComplete?(status, reconnect, box.value)
            }
        }
    }

    /// IKEventSource's advice: reconnect after a 2xx other than 200 (its reading of the 2009
    /// W3C draft), not after a 200 or any other status.
    static func shouldReconnect(status: Int) -> Bool {
        status != 200 && (200..<300).contains(status)
    }

    /// The error of a connection that got no response, as URLSession reports it.
    static func urlError(_ error: RealtimeError?) -> NSError {
        guard let error else {
            return NSError(domain: NSURLErrorDomain, code: NSURLErrorCancelled, userInfo: [NSLocalizedDescriptionKey: "cancelled"])
        }
        let code: Int
        switch error.code {
        case .cancelled: code = NSURLErrorCancelled
        case .invalidURL: code = NSURLErrorBadURL
        case .connectFailed, .proxyFailed: code = NSURLErrorCannotConnectToHost
        case .timeout: code = NSURLErrorTimedOut
        case .tlsFailure, .certificatePinMismatch: code = NSURLErrorSecureConnectionFailed
        case .connectionClosed: code = NSURLErrorNetworkConnectionLost
        default: code = NSURLErrorUnknown
        }
        return NSError(domain: NSURLErrorDomain, code: code, userInfo: [
            NSLocalizedDescriptionKey: error.description, NSUnderlyingErrorKey: error,
        ])
    }
}

