import Foundation
public import ServiceLifecycle
import Tracing
package import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) public import RealtimeCore

/// A connection to an ASP.NET Core SignalR hub (or any server speaking the SignalR protocol).
///
/// Build one with ``HubConnectionBuilder``, register handlers with `on`, then `start()`. Calls to
/// `invoke`, `send` and `stream` need a connected connection; they fail at once with
/// `notConnected` otherwise. When the connection drops, every pending invocation and stream fails
/// at once with `connectionClosed` (nothing waits for a timeout), and with a retry policy the
/// connection reconnects, calling `onReconnecting` and `onReconnected`.
///
/// The lifecycle rules live in a value state machine (`HubConnectionStateMachine`); this class
/// performs its actions: sockets, tasks, timers and callbacks.
public final class HubConnection: Service, Sendable {
    /// The options the connection was made with.
    public let options: HubConnectionOptions
    let codec: HubProtocolCodec
    /// The size of an encoded Ping, counted in the metrics for each keep-alive written on the event loop.
    let encodedPingSize: Int
    package let logger: Logger
    let state: NIOLockedValueBox<Shared>
    /// Holds reading while the handlers or a stream's reader are behind (every transport, every
    /// session of this connection: a full buffer outlives the socket that filled it).
    let readGate = ReadGate()
    let metrics: ClientMetrics
    /// Counts reconnect attempts, asks the retry policy, arms the delays, gives up; reports the
    /// connection's attempts, failures and open connections to `metrics`. The one reconnect driver
    /// of every client, driven here from the connection's ends (its rules' actions: ``HubConnectionStateMachine``).
    let driver: ReconnectDriver
    /// Deadlines (handshake, keep-alive, server timeout, acknowledgements) on the runtime's clock.
    var timers: TimerQueue { options.runtime.timers }

    /// The lifecycle machine, its pending calls completed through `Pending`.
    typealias Lifecycle = HubConnectionStateMachine<Pending>

    struct Shared: Sendable {
        var machine: Lifecycle
        var session: Session?
        var generation = 0
        var handlers: [String: [Handler]] = [:] { didSet { lastFound = nil } }
        /// The last target whose handlers were looked up (as the server spelled it), with them
        /// and whether each is one that does not await (and answers nothing):
        /// invocations of one target in a row find them without folding and hashing its name.
        /// Forgotten at every change of `handlers`.
        var lastFound: (target: String, handlers: [Handler], allAtOnce: Bool)?
        var reconnecting: [@Sendable (any Error) async -> Void] = []
        var reconnected: [@Sendable () async -> Void] = []
        var closed: [@Sendable ((any Error)?) async -> Void] = []
        var connectionId: String?
        /// The dispatcher's consumer starter is set (``startDispatcher()``).
        var dispatcherStarted = false
        var dispatcher: InboundBuffer<Dispatched>?
        /// Stateful reconnect's replay buffer, when the server agreed to it (WebSockets only).
        var replay: ReplayBuffer?
        /// The outgoing messages of the transport being opened or in use (with stateful
        /// reconnect, of every WebSocket of the connection).
        var outbox: HubOutbox?
        /// Stateful reconnect's driver and the resume under way (a stateful connection only).
        var resume: StatefulResume?
        var statefulReconnects = 0
        /// `stop()` calls waiting for the transport to be gone and its end handled (the machine
        /// says when: ``HubConnectionStateMachine/stopMayReturn``).
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// ``waitUntilClosed()`` calls, woken when the connection closes for good.
        var closeWaiters: [UUID: CheckedContinuation<Void, Never>] = [:]
        /// The machine's actions for the driver's giving up, told while the driver was told an end:
        /// performed by whoever told it (``perform(_:)``).
        var driverActions: [Lifecycle.Action] = []
        /// The reconnect attempt under way (negotiate, connect, handshake) and its number: `stop()`
        /// cancels it and waits for it, so nothing connects after `stop()` returned.
        var attemptTask: (attempt: Int, task: Task<Void, Never>)?
        /// The error of this reconnect's last failed attempt (for `beforeReconnectAttempt`).
        var lastAttemptError: RealtimeError?
        /// A connect waiting its turn among the set-ups to its host: `stop()` withdraws it.
        var setUpWait: (host: String, id: UInt64)?
    }

    enum Pending: Sendable {
        case invocation(OneShot<JSONValue?>)
        case stream(InboundBuffer<JSONValue>)
    }

    /// Stateful reconnect: a ``ReconnectDriver`` of its own (stateful reconnect's delays; its
    /// attempts are counted across re-attached sockets that did not stay up) replaces a lost
    /// WebSocket under the connection, which stays in ``HubConnectionStateMachine/State/resuming``
    /// meanwhile. The app's reconnect (the connection's `driver`) is not involved unless the resume
    /// gives up.
    struct StatefulResume {
        let driver: ReconnectDriver
        /// The loss being resumed: the session's generation, its error, whether a reconnect would
        /// be allowed after it, and how to open a new socket for it.
        var loss: ResumeLoss?
        /// The attempt under way (opening a socket): `stop()` cancels it and waits for it.
        var attempt: (number: Int, task: Task<Void, Never>)?
        /// The driver gave up: whoever told it the last failure ends the connection.
        var gaveUp = false
    }

    /// A class: the connection's state keeps a reference (a `RealtimeError` inline would make every
    /// connection's state larger).
    final class ResumeLoss: Sendable {
        let generation: Int
        let error: RealtimeError
        let allowReconnect: Bool
        let resume: @Sendable () async throws -> Void

        init(generation: Int, error: RealtimeError, allowReconnect: Bool, resume: @escaping @Sendable () async throws -> Void) {
            self.generation = generation
            self.error = error
            self.allowReconnect = allowReconnect
            self.resume = resume
        }
    }

    /// What the handler task runs, in arrival order: server invocations, and the reconnect
    /// notification (so `onReconnected` runs after the handlers of what came before it and before
    /// those of what came after).
    enum Dispatched: Sendable {
        case invocation(HubInvocation)
        case reconnected
    }

    /// What `Handler.run` calls for a typed handler: an existential, so the closure holds the
    /// argument types inside the value. A closure that used the generic types itself would capture
    /// their metatypes, which Swift 6 cannot prove `Sendable` for every `Decodable` type.
    protocol TypedHandling: Sendable {
        func run(_ arguments: [JSONValue]) async throws -> JSONValue?
    }

    /// ``TypedHandling`` for a handler that does not await.
    protocol SyncTypedHandling: Sendable {
        func run(_ arguments: [JSONValue]) throws
    }

    /// A typed handler that does not await: the dispatcher calls it without a suspension.
    struct SyncTypedHandler<each Argument: Decodable>: SyncTypedHandling {
        let method: String
        let handler: @Sendable (repeat each Argument) -> Void

        func run(_ arguments: [JSONValue]) throws {
            let values = try HubArgumentBinder.bind(arguments, target: method, as: repeat (each Argument).self)
            handler(repeat each values)
        }
    }

    /// ``TypedResultHandler`` for a handler that does not await (its answer is sent, which
    /// awaits).
    struct SyncTypedResultHandler<each Argument: Decodable, Result: Encodable>: TypedHandling {
        let method: String
        let handler: @Sendable (repeat each Argument) throws -> Result

        func run(_ arguments: [JSONValue]) async throws -> JSONValue? {
            let values = try HubArgumentBinder.bind(arguments, target: method, as: repeat (each Argument).self)
            return try HubValueCoding.encode(try handler(repeat each values))
        }
    }

    /// A typed handler and the argument types it binds.
    struct TypedHandler<each Argument: Decodable>: TypedHandling {
        let method: String
        let handler: @Sendable (repeat each Argument) async -> Void

        func run(_ arguments: [JSONValue]) async throws -> JSONValue? {
            let values = try HubArgumentBinder.bind(arguments, target: method, as: repeat (each Argument).self)
            await handler(repeat each values)
            return nil
        }
    }

    /// ``TypedHandler`` for a handler whose value answers a client result.
    struct TypedResultHandler<each Argument: Decodable, Result: Encodable>: TypedHandling {
        let method: String
        let handler: @Sendable (repeat each Argument) async throws -> Result

        func run(_ arguments: [JSONValue]) async throws -> JSONValue? {
            let values = try HubArgumentBinder.bind(arguments, target: method, as: repeat (each Argument).self)
            return try HubValueCoding.encode(try await handler(repeat each values))
        }
    }

    struct Handler: Sendable {
        /// Runs the handler with the invocation's target and arguments; a returning handler gives
        /// the value for a client result.
        /// In the dispatcher's isolation: the steps from the dispatcher's task (on the connection's
        /// event loop) to the user's handler cost no executor switch each.
        let run: nonisolated(nonsending) @Sendable (String, [JSONValue]) async throws -> JSONValue?
        let returnsResult: Bool
        /// The handler when it does not await (and answers nothing): called without `run`'s
        /// suspensions. (A closure: an optional existential is copied through generic code.)
        var atOnce: (@Sendable ([JSONValue]) throws -> Void)? = nil
    }

    /// An open transport: how to send on it and how to close it.
    struct Session: Sendable {
        let generation: Int
        let transport: HttpTransportType
        /// Where its messages wait to be written.
        let outbox: HubOutbox
        /// Writes a Ping at once without waiting (WebSockets); nil: Pings go through `send`.
        var sendPing: (@Sendable () -> Void)? = nil
        let close: @Sendable (RealtimeError?) async -> Void
        let run: SessionRun

        /// Ends the session at once with `error` (a timeout): no closing handshake.
        func abort(_ error: RealtimeError) {
            run.requestClose(error)
            run.cancelTask()
        }
    }

    /// Makes a connection; ``HubConnectionBuilder`` is the usual way.
    /// - Parameters:
    ///   - options: the URL, transports, protocol, timeouts and limits.
    ///   - logLevel: the lowest level the connection logs (nil: the runtime logger's own level).
    public init(options: HubConnectionOptions, logLevel: LogLevel? = nil) {
        var options = options
        // Every transport of this connection, reconnects included, runs on one event loop (`eventLoop`).
        options.runtime = options.runtime.pinnedToOneLoop()
        self.options = options
        codec = HubProtocolCodec(options.hubProtocol, maximumMessageSize: options.maximumReceiveMessageSize)
        encodedPingSize = codec.encode(.ping).count
        var logger = options.runtime.logger
        if let logLevel {
            logger.logLevel = switch logLevel {
            case .debug: .debug
            case .information: .info
            case .warning: .warning
            case .error: .error
            }
        }
        self.logger = logger
        metrics = ClientMetrics.shared(protocol: "signalr", client: options.clientLabel, runtime: options.runtime)
        var timing = Lifecycle.Timing()
        timing.keepAliveInterval = options.keepAliveInterval
        timing.serverTimeout = options.serverTimeout
        state = NIOLockedValueBox(Shared(machine: Lifecycle(timing: timing, reconnects: options.retryPolicy != nil)))
        driver = ReconnectDriver(policy: Self.reconnectPolicy(options.retryPolicy), runtime: options.runtime)
        driver.report(to: metrics)
    }

    /// The reconnect rules of a hub connection: the retry policy is asked before each attempt
    /// (attempts so far, time since the connection was lost, the last failure), every error is
    /// retried while it answers, no reachability wait (as the reference clients), and a reconnected
    /// connection that drops within 5 s without carrying a message continues the reconnect it came
    /// from (so a server that accepts and drops at once is not retried forever).
    package static func reconnectPolicy(_ policy: (any RetryPolicy)?) -> ReconnectPolicy {
        guard let policy else { return .disabled }
        let backoff = BackoffPolicy.asking { attempt in
            let context = RetryContext(retryCount: attempt.number - 1, elapsed: attempt.elapsed.timeInterval, retryReason: attempt.reason)
            guard let seconds = policy.nextRetryInterval(retryContext: context) else { return nil }
            return .milliseconds(Int64((max(0, seconds) * 1000).rounded()))
        }
        return ReconnectPolicy(backoff: backoff, reachability: AlwaysReachable(), shouldRetry: retriesAfter, stableAfter: .seconds(5))
    }

    /// Every failure is worth another attempt while the retry policy answers (as the .NET and
    /// TypeScript clients decide it, a rejected certificate included), but an invalid URL and a
    /// cancellation, which no attempt changes.
    static let retriesAfter: @Sendable (RealtimeError) -> Bool = { error in
        error.code != .invalidURL && error.code != .cancelled
    }

    /// What the reconnect driver says: an attempt is due, an attempt failed, or it gave up.
    private func driverSaid(_ event: ReconnectDriver.Event) {
        switch event {
        case .connect(let attempt):
            // Attempt 0 is start()'s own, which start() opens.
            state.withLockedValue { shared in
                guard !shared.machine.reconnectDue(attempt: attempt).isEmpty else { return }
                // The attempt (negotiate, connect) runs as a task when it comes due on the driver's
                // deadline: start() has returned long ago; stop() cancels it (kept here under the
                // lock that made it due, so a stop() cannot come between the two).
                shared.attemptTask = (attempt, ownTask { await self.reconnect(attempt: attempt) })
            }
        case .failed(let error, let willRetry):
            logger.debug(
                "connection attempt failed",
                metadata: ["realtime.error_code": "\(error.code)", "realtime.will_retry": "\(willRetry)"])
        case .finished(let error):
            // Told only while this connection tells the driver an end or stops it: the actions are
            // performed by that caller, after the ones it is performing (``perform(_:)``).
            state.withLockedValue { $0.driverActions += $0.machine.reconnectEnded(error) }
        }
    }

    // MARK: State

    /// The connection's state, as the official client names it.
    public enum State: Sendable, Equatable {
        /// Not started, or stopped.
        case stopped
        /// Starting: negotiate, transport, handshake.
        case connecting
        /// Connected: calls go out.
        case connected
        /// Reconnecting after a drop (automatic reconnect).
        case reconnecting
    }

    /// The current state.
    public var currentState: State {
        switch state.withLockedValue({ $0.machine.state }) {
        case .disconnected, .stopping: .stopped
        case .connecting: .connecting
        // A stateful resume replaces the socket under a connection that carries on.
        case .connected, .resuming: .connected
        case .reconnecting: .reconnecting
        }
    }

    /// The connection's state as every client of this package reports it (connecting, connected,
    /// reconnecting(attempt), disconnected(error)), current and as a sequence of changes. A stateful
    /// reconnect, which replaces a socket under a connection that carries on, is not a change.
    public var connectionState: StateBroadcaster<ConnectionState> { driver.state }

    /// How many times a lost WebSocket was replaced by a stateful reconnect (the connection and
    /// its pending calls carried on).
    public var statefulReconnectCount: Int { state.withLockedValue { $0.statefulReconnects } }

    /// Whether the server agreed to stateful reconnect for the current connection.
    public var isStateful: Bool { state.withLockedValue { $0.replay != nil } }

    /// The server's public id for this connection (from negotiate), nil when negotiation was skipped.
    public var connectionId: String? { state.withLockedValue { $0.connectionId } }

    // MARK: Lifecycle callbacks

    /// Called when the connection is lost and a reconnect begins.
    public func onReconnecting(_ handler: @escaping @Sendable (any Error) async -> Void) {
        state.withLockedValue { $0.reconnecting.append(handler) }
    }

    /// Called when a reconnect succeeded.
    public func onReconnected(_ handler: @escaping @Sendable () async -> Void) {
        state.withLockedValue { $0.reconnected.append(handler) }
    }

    /// Called once when the connection closes for good: nil after `stop()`, the error otherwise.
    public func onClosed(_ handler: @escaping @Sendable ((any Error)?) async -> Void) {
        state.withLockedValue { $0.closed.append(handler) }
    }

    // MARK: Start and stop

    /// Connects: negotiates, opens a transport and completes the handshake. Throws the reason when
    /// that fails (a failed start does not reconnect).
    public func start() async throws {
        let actions = try state.withLockedValue { shared in
            if shared.dispatcher == nil {
                let dispatcher = InboundBuffer<Dispatched>(limit: options.handlerQueueSize)
                readGate.attach(dispatcher)
                shared.dispatcher = dispatcher
            }
            return try shared.machine.start()
        }
        driver.start { [weak self] event in self?.driverSaid(event) }
        startDispatcher()
        for action in actions {
            if case .connect = action {
                do {
                    try await openTransport()
                } catch {
                    let failure = Self.realtimeError(error)
                    let (next, dispatcher) = state.withLockedValue { shared in
                        defer {
                            shared.dispatcher = nil
                            shared.dispatcherStarted = false
                        }
                        return (shared.machine.connectFailed(failure, now: timers.now), shared.dispatcher)
                    }
                    dispatcher?.finish()
                    await perform(next)
                    releaseStopWaiters()
                    options.lifecycleObserver?.didFailToOpen(failure)
                    throw failure
                }
                options.lifecycleObserver?.didOpen(self)
            }
        }
    }

    /// Runs the connection as a `Service`: starts it (unless it is already running), then returns
    /// when it closes for good. A graceful shutdown of the service group stops it (`onClosed` has
    /// run when this returns); a failed start throws.
    public func run() async throws {
        if currentState == .stopped { try await start() }
        // Returns when the connection closed, or (cancelled) at the graceful shutdown.
        await cancelWhenGracefulShutdown { await self.waitUntilClosed() }
        await stop()
    }

    /// Returns when the connection has closed for good (after ``stop()``, a failed reconnect, or a
    /// close without reconnect), once `onClosed` handlers have run; at once when it is not running,
    /// or when the waiting task is cancelled.
    public func waitUntilClosed() async {
        let id = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let closed = state.withLockedValue { shared -> Bool in
                    guard !shared.machine.isClosed, !Task.isCancelled else { return true }
                    shared.closeWaiters[id] = waiter
                    return false
                }
                if closed { waiter.resume() }
            }
        } onCancel: {
            self.state.withLockedValue { $0.closeWaiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Closes the connection. Pending invocations fail with `cancelled`; `onClosed` is called with nil
    /// and its handlers have returned by the time `stop()` returns.
    public func stop() async {
        let (actions, session, attempt, resumeAttempt, setUpWait) = state.withLockedValue {
            ($0.machine.stop(), $0.session, $0.attemptTask?.task, $0.resume?.attempt?.task, $0.setUpWait)
        }
        // A connect still waiting its turn to set up ends now, with the stop.
        if let setUpWait { options.runtime.setUpLimiter.cancelRequest(host: setUpWait.host, id: setUpWait.id) }
        // A reconnect attempt under way is cancelled (.stopReconnecting) and awaited below, and so
        // is a stateful resume's (.stopResuming). Only when this stop() ended it: an `onClosed`
        // handler that calls stop() runs inside the attempt that gave up, and finds the connection
        // stopped already.
        let endsAttempt = actions.contains { if case .stopReconnecting = $0 { true } else { false } }
        let endsResume = actions.contains { if case .stopResuming = $0 { true } else { false } }
        for action in actions {
            if case .closeTransport = action {
                await session?.close(nil)
            }
        }
        await perform(actions.filter { if case .closeTransport = $0 { false } else { true } })
        if endsAttempt { await attempt?.value }
        if endsResume { await resumeAttempt?.value }
        // Wait for the transport to be gone (and its end handled), so a stop() that returned means
        // no more callbacks. Woken by the transport's end, not by polling.
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let stopped = state.withLockedValue { shared -> Bool in
                guard !shared.machine.stopMayReturn else { return true }
                shared.stopWaiters.append(waiter)
                return false
            }
            if stopped { waiter.resume() }
        }
    }

    /// Called after the actions of a transport's end or failed connect are performed: resumes the
    /// `stop()` calls waiting when the machine says they may return.
    private func releaseStopWaiters() {
        let waiters = state.withLockedValue { shared -> [CheckedContinuation<Void, Never>] in
            guard shared.machine.endHandled() else { return [] }
            defer { shared.stopWaiters = [] }
            return shared.stopWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    // MARK: Invocations

    /// Invokes `method` and waits for its completion (a `void` hub method). An ``UploadStream``
    /// argument is streamed to the server.
    public func invoke(method: String, arguments: any Encodable...) async throws {
        _ = try await invoke(method: method, argumentList: arguments)
    }

    /// Invokes `method` and returns its result as `Result`.
    public func invoke<Result: Decodable>(method: String, arguments: any Encodable...) async throws -> Result {
        let (values, streams) = try encodeArguments(arguments)
        let value = try await invokeRaw(method: method, arguments: values, uploads: streams)
        return try HubValueCoding.decode(value ?? .null, as: Result.self)
    }

    /// ``invoke(method:arguments:)`` with the arguments in an array (``UploadStream``s among them
    /// stream); returns the result, nil for `void`. For the SignalRClient compat module, whose
    /// callers hold their arguments in an array.
    package func invoke(method: String, argumentList: [any Encodable]) async throws -> JSONValue? {
        let (values, streams) = try encodeArguments(argumentList)
        return try await invokeRaw(method: method, arguments: values, uploads: streams)
    }

    /// ``send(method:arguments:)`` with the arguments in an array (for the SignalRClient compat
    /// module).
    package func send(method: String, argumentList: [any Encodable]) async throws {
        let (values, streams) = try encodeArguments(argumentList)
        let session = try currentSession()
        try await transmit(.invocation(HubInvocation(target: method, arguments: values, streamIds: streams.map(\.id))), on: session)
        startUploads(streams, on: session)
    }

    /// Invokes `method` with arguments as `JSONValue`s; returns the result (nil for `void`).
    public func invokeRaw(method: String, arguments: [JSONValue]) async throws -> JSONValue? {
        try await invokeRaw(method: method, arguments: arguments, uploads: [])
    }

    func invokeRaw(method: String, arguments: [JSONValue], uploads: [(id: String, stream: UploadStream)]) async throws -> JSONValue? {
        let (id, session) = try reserveInvocation()
        let started = ContinuousClock.now
        let span = options.runtime.startMessageSpan("realtime.invoke", protocol: "signalr", client: options.clientLabel)
        span?.attributes["realtime.method"] = method
        defer { span?.end() }
        let reply = OneShot<JSONValue?>()
        let registered = state.withLockedValue { shared -> Bool in
            guard shared.session?.generation == session.generation else { return false }
            shared.machine.callStarted(id, .invocation(reply))
            return true
        }
        guard registered else { throw RealtimeError(.connectionClosed, "the connection was lost before '\(method)' was sent") }
        do {
            let invocation = HubMessage.invocation(HubInvocation(
                invocationId: id, target: method, arguments: arguments, streamIds: uploads.map(\.id)))
            if let span {
                // The request that carries it (a POST over SSE or long polling) carries the span's context.
                try await span.withContextBound { try await transmit(invocation, on: session, awaitingWrite: false) }
            } else {
                try await transmit(invocation, on: session, awaitingWrite: false)
            }
            startUploads(uploads, on: session)
        } catch {
            completePending(id, with: .failure(Self.sendError(error, method: method)))
        }
        do {
            let value = try await withTaskCancellationHandler {
                try await reply.value()
            } onCancel: {
                self.completePending(id, with: .failure(CancellationError()))
            }
            metrics.recordCall(since: started)
            return value
        } catch {
            span?.fail(error)
            throw error
        }
    }

    /// Invokes `method` without waiting for a result (no invocation id is sent). An
    /// ``UploadStream`` argument is streamed to the server.
    public func send(method: String, arguments: any Encodable...) async throws {
        try await send(method: method, argumentList: arguments)
    }

    /// ``send(method:arguments:)`` with `JSONValue` arguments.
    public func sendRaw(method: String, arguments: [JSONValue]) async throws {
        let session = try currentSession()
        try await transmit(.invocation(HubInvocation(target: method, arguments: arguments)), on: session)
    }

    /// Starts the server-to-client stream `method`. Items arrive in order; the sequence ends with
    /// the server's completion and throws its error. A slow consumer holds at most
    /// `streamBufferSize` items, then reading from the server waits.
    ///
    /// The result is itself an `AsyncSequence` of typed items (iterate it directly: no hop off the
    /// caller's actor per item), and a ``StreamResult`` whose `stream` is the official client's
    /// `AsyncThrowingStream`.
    public func stream<Element: Decodable & Sendable>(method: String, arguments: any Encodable...) async throws -> HubStream<Element> {
        let raw = try await streamRaw(method: method, arguments: try arguments.map { try HubValueCoding.encode($0) })
        return HubStream<Element>(raw: raw)
    }

    /// ``stream(method:arguments:)`` with `JSONValue` arguments and items.
    public func streamRaw(method: String, arguments: [JSONValue]) async throws -> HubRawStream {
        let (id, session) = try reserveInvocation()
        let buffer = InboundBuffer<JSONValue>(limit: options.streamBufferSize)
        readGate.attach(buffer)
        let registered = state.withLockedValue { shared -> Bool in
            guard shared.session?.generation == session.generation else { return false }
            shared.machine.callStarted(id, .stream(buffer))
            return true
        }
        guard registered else { throw RealtimeError(.connectionClosed, "the connection was lost before '\(method)' was sent") }
        do {
            try await transmit(.streamInvocation(HubInvocation(invocationId: id, target: method, arguments: arguments)), on: session, awaitingWrite: false)
        } catch {
            let failure = Self.sendError(error, method: method)
            completePending(id, with: .failure(failure))
            throw failure
        }
        return HubRawStream(buffer: buffer) { [weak self] in
            guard let self else { return }
            let wasPending = self.state.withLockedValue { $0.machine.callEnded(id) != nil }
            buffer.finish()
            if wasPending, let session = try? self.currentSession() {
                try? await self.transmit(.cancelInvocation(HubCancelInvocation(invocationId: id)), on: session)
            }
        }
    }

    private func currentSession() throws -> Session {
        try state.withLockedValue { shared in
            guard shared.machine.acceptsCalls, let session = shared.session else {
                throw RealtimeError(.notConnected, "cannot send data while the connection is \(shared.machine.state); wait for start() or a reconnect")
            }
            return session
        }
    }

    private func reserveInvocation() throws -> (String, Session) {
        try state.withLockedValue { shared in
            let id = try shared.machine.reserveInvocation()
            guard let session = shared.session else {
                throw RealtimeError(.notConnected, "cannot send data while the connection is \(shared.machine.state); wait for start() or a reconnect")
            }
            return (id, session)
        }
    }

    private func completePending(_ id: String, with result: Result<JSONValue?, any Error>) {
        guard let pending = state.withLockedValue({ $0.machine.callEnded(id) }) else { return }
        switch pending {
        case .invocation(let reply): reply.complete(result)
        case .stream(let buffer):
            if case .failure(let error) = result { buffer.finish(throwing: error) } else { buffer.finish() }
        }
    }

    // MARK: Handlers

    /// Registers a handler for the client method `method` (matched without regard to case). Each
    /// argument is decoded as its parameter's type; an invocation whose arguments do not bind is
    /// logged and skipped.
    ///
    /// Handlers run one at a time, in the order the invocations arrived, in a task that prefers the
    /// connection's event loop (``eventLoop``): an invocation reaches its handler on the thread that
    /// read it. A handler shares that thread with the connection's I/O, so it must not block; what
    /// it awaits (an actor, another task) runs where that is isolated.
    public func on<each Argument: Decodable>(
        _ method: String, handler: @escaping @Sendable (repeat each Argument) async -> Void
    ) {
        let typed: any TypedHandling = TypedHandler(method: method, handler: handler)
        addHandler(method, Handler(run: { _, arguments in try await typed.run(arguments) }, returnsResult: false))
    }

    /// Registers a handler that does not await, for the client method `method` (matched without
    /// regard to case); a closure with no `await` in it is this one. It runs as the handlers that
    /// await do, one at a time and in arrival order with them, in the task that prefers the
    /// connection's event loop, but it is called without a suspension: an invocation costs no
    /// task frame and no executor check. It must not block: it shares its thread with the
    /// connection's I/O. (The .NET client has both kinds too: `Action` and `Func<Task>` handlers.)
    public func on<each Argument: Decodable>(
        _ method: String, handler: @escaping @Sendable (repeat each Argument) -> Void
    ) {
        let typed: any SyncTypedHandling = SyncTypedHandler(method: method, handler: handler)
        addHandler(method, Handler(run: { _, arguments in try typed.run(arguments); return nil }, returnsResult: false, atOnce: { try typed.run($0) }))
    }

    /// Registers a handler that does not await and whose return value answers the server's
    /// invocation (a client result); a closure with no `await` in it that returns a value is this
    /// one. It runs as the other handlers do, in order; a thrown error is sent back as the
    /// completion's error.
    public func on<each Argument: Decodable, Result: Encodable>(
        _ method: String, handler: @escaping @Sendable (repeat each Argument) throws -> Result
    ) {
        let typed: any TypedHandling = SyncTypedResultHandler(method: method, handler: handler)
        addHandler(method, Handler(run: { _, arguments in try await typed.run(arguments) }, returnsResult: true))
    }

    /// Registers a handler whose return value answers the server's invocation (a client result).
    /// A thrown error is sent back as the completion's error.
    public func on<each Argument: Decodable, Result: Encodable>(
        _ method: String, handler: @escaping @Sendable (repeat each Argument) async throws -> Result
    ) {
        let typed: any TypedHandling = TypedResultHandler(method: method, handler: handler)
        addHandler(method, Handler(run: { _, arguments in try await typed.run(arguments) }, returnsResult: true))
    }

    /// Registers a handler that receives the arguments as they came, any count.
    public func on(_ method: String, rawHandler: @escaping @Sendable ([JSONValue]) async -> Void) {
        addHandler(method, Handler(run: { _, arguments in
            await rawHandler(arguments)
            return nil
        }, returnsResult: false))
    }

    /// Registers a handler that receives the invocation's target as the server spelled it and its
    /// arguments as they came; when `returnsResult`, its value answers a client-result invocation
    /// (a thrown error is sent back as the completion's error). For the SignalRClient compat module,
    /// whose originals match names case-sensitively and bind arguments at run time.
    package func on(_ method: String, returnsResult: Bool, targetHandler: @escaping @Sendable (String, [JSONValue]) async throws -> JSONValue?) {
        addHandler(method, Handler(run: targetHandler, returnsResult: returnsResult))
    }

    /// Removes every handler of `method`.
    public func off(_ method: String) {
        _ = state.withLockedValue { $0.handlers.removeValue(forKey: Self.handlerKey(method)) }
    }

    private func addHandler(_ method: String, _ handler: Handler) {
        state.withLockedValue { $0.handlers[Self.handlerKey(method), default: []].append(handler) }
    }

    /// How many times the handlers' task was started with invocations (once per batch a read
    /// brought, when it keeps up), for tests of the hand-over.
    package var handlerWakeUps: Int { state.withLockedValue { $0.dispatcher }?.consumerWakeUps ?? 0 }

    /// The handlers run in one task at a time, in the order the invocations arrived, a batch per
    /// wake-up; the task runs while invocations wait and ends when none does (a quiet connection
    /// keeps no task waiting for them).
    private func startDispatcher() {
        let dispatcher = state.withLockedValue { shared -> InboundBuffer<Dispatched>? in
            guard !shared.dispatcherStarted else { return nil }
            shared.dispatcherStarted = true
            return shared.dispatcher
        }
        guard let dispatcher else { return }
        // Unstructured: start() (the official client's shape) may be called without run(), and
        // invocations arrive from the connection's event loop; each task drains what waits and ends.
        // It prefers that loop: a read's invocations reach their handlers on the thread that read
        // them, after the read, without waking another thread.
        let runtime = options.runtime
        dispatcher.setConsumerStarter { [weak self] in
            guard self != nil else { return }
            _ = ownTask(preferring: runtime) { [weak self] in
                while var batch = dispatcher.takeOrPark() {
                    guard let self else { return }
                    // Each item moved out of the batch, which is let go after (copying an
                    // invocation copies its headers' table too).
                    for index in batch.indices {
                        switch batch.take(at: index, leaving: .reconnected) {
                        case .invocation(let invocation):
                            if let handlers = self.runAtOnce(invocation) { await self.runHandlers(invocation, handlers) }
                        case .reconnected: await self.runReconnectedHandlers()
                        }
                    }
                }
            }
        }
    }

    nonisolated(nonsending) private func runReconnectedHandlers() async {
        options.lifecycleObserver?.didReconnect()
        for handler in state.withLockedValue({ $0.reconnected }) { await handler() }
    }

    /// A method's key in the handler table: method names match without regard to case, as the
    /// official clients match them. A name with no capital ASCII letter and nothing else to fold is
    /// its own key (no new string per invocation).
    static func handlerKey(_ method: String) -> String {
        var method = method
        let folded = method.withUTF8 { bytes in
            bytes.allSatisfy { $0 < 0x80 && !(UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }
        }
        return folded ? method : method.lowercased()
    }

    /// Runs the invocation's handlers now when none awaits and none answers (the server asks for
    /// no result); else returns them, for ``runHandlers(_:_:)``, having run none.
    private func runAtOnce(_ invocation: HubInvocation) -> [Handler]? {
        let (handlers, allAtOnce) = state.withLockedValue { state in
            if let found = state.lastFound, found.target == invocation.target { return (found.handlers, found.allAtOnce) }
            let handlers = state.handlers[Self.handlerKey(invocation.target)] ?? []
            let allAtOnce = !handlers.isEmpty && handlers.allSatisfy { $0.atOnce != nil }
            state.lastFound = (invocation.target, handlers, allAtOnce)
            return (handlers, allAtOnce)
        }
        guard invocation.invocationId == nil, allAtOnce else { return handlers }
        for index in handlers.indices {
            do {
                // Bound, not `unsafelyUnwrapped`: that generic accessor hands the closure back
                // through a thunk allocated per call.
                if let atOnce = handlers[index].atOnce { try atOnce(invocation.arguments) }
            } catch {
                logThrow(error, invocation)
            }
        }
        return nil
    }

    private func logThrow(_ error: any Error, _ invocation: HubInvocation) {
        logger.warning(
            "a client method handler threw",
            metadata: ["realtime.method": "\(invocation.target)", "realtime.error": "\(Redaction.describe(error))"])
    }

    nonisolated(nonsending) private func runHandlers(_ invocation: HubInvocation, _ handlers: [Handler]) async {
        var result: Result<JSONValue?, any Error>?
        if handlers.isEmpty {
            logger.warning("no handler for a client method the server invoked", metadata: ["realtime.method": "\(invocation.target)"])
        }
        for handler in handlers {
            do {
                let value = try await handler.run(invocation.target, invocation.arguments)
                if handler.returnsResult, result == nil { result = .success(value) }
            } catch {
                logThrow(error, invocation)
                if handler.returnsResult, result == nil { result = .failure(error) }
            }
        }
        guard let id = invocation.invocationId else { return }
        // The server waits for a result: answer even when no handler gave one.
        let outcome: HubCompletion.Outcome = switch result {
        case .success(let value)?: .result(value ?? .null)
        case .failure(let error)?: .error("Error trying to invoke '\(invocation.target)': \(error)")
        case nil: .error("Client didn't provide a result.")
        }
        if let session = try? currentSession() {
            try? await transmit(.completion(HubCompletion(invocationId: id, outcome: outcome)), on: session)
        }
    }

    // MARK: Performing the state machine's actions

    func perform(_ actions: [Lifecycle.Action]) async {
        for action in actions {
            switch action {
            case .connect:
                break  // start() opens the first transport itself; a reconnect's opens in driverSaid
            case .reportOpened:
                driver.opened()
            case .endSession(let end):
                driver.ended(end)
                await perform(takeDriverActions())
            case .stopResuming:
                // The lost socket's session ends with the resume: its outbox lets waiting sends go.
                let (resume, outbox) = state.withLockedValue { shared in
                    defer {
                        shared.resume?.loss = nil
                        shared.resume?.attempt = nil
                        shared.session = nil
                        shared.replay = nil
                        shared.outbox = nil
                    }
                    return (shared.resume, shared.outbox)
                }
                resume?.driver.stop()
                resume?.attempt?.task.cancel()
                outbox?.close(RealtimeError(.cancelled, "the connection was stopped"))
            case .stopReconnecting:
                driver.stop()
                state.withLockedValue { shared in
                    defer { shared.attemptTask = nil }
                    return shared.attemptTask
                }?.task.cancel()
                await perform(takeDriverActions())
            case .failPending(let calls, let error):
                for call in calls {
                    switch call {
                    case .invocation(let reply): reply.complete(.failure(error))
                    case .stream(let buffer): buffer.finish(throwing: error)
                    }
                }
            case .notifyReconnecting(let error):
                state.withLockedValue { $0.lastAttemptError = nil }
                logger.debug("connection lost, reconnecting", metadata: ["realtime.error_code": "\(error.code)", "realtime.error": "\(error.detail)"])
                options.lifecycleObserver?.willReconnect(error)
                for handler in state.withLockedValue({ $0.reconnecting }) { await handler(error) }
            case .notifyReconnected:
                // Through the handler task, in order with the invocations around it.
                state.withLockedValue { $0.dispatcher }?.yield(.reconnected)
            case .notifyClosed(let error):
                options.lifecycleObserver?.didClose(error)
                let (handlers, dispatcher) = state.withLockedValue { shared in
                    defer {
                        shared.dispatcher = nil
                        shared.dispatcherStarted = false
                    }
                    return (shared.closed, shared.dispatcher)
                }
                dispatcher?.finish()
                for handler in handlers { await handler(error) }
                let waiters = state.withLockedValue { shared in
                    defer { shared.closeWaiters = [:] }
                    return shared.closeWaiters.values
                }
                for waiter in waiters { waiter.resume() }
            case .sendPing:
                if let session = state.withLockedValue({ $0.session }) {
                    try? await transmit(.ping, on: session)
                }
            case .abortTransport(let error):
                if let session = state.withLockedValue({ $0.session }) { await session.close(error) }
            case .closeTransport:
                if let session = state.withLockedValue({ $0.session }) { await session.close(nil) }
            }
        }
    }

    private func takeDriverActions() -> [Lifecycle.Action] {
        state.withLockedValue { shared in
            defer { shared.driverActions = [] }
            return shared.driverActions
        }
    }

    private func reconnect(attempt: Int) async {
        guard state.withLockedValue({ $0.machine.state == .reconnecting(attempt: attempt) }) else { return }
        defer {
            // Let go of this attempt's task (not of a later attempt's, made due meanwhile).
            state.withLockedValue { if $0.attemptTask?.attempt == attempt { $0.attemptTask = nil } }
        }
        if let before = options.beforeReconnectAttempt, let previous = state.withLockedValue({ $0.lastAttemptError }) {
            await before(previous)
            guard state.withLockedValue({ $0.machine.state == .reconnecting(attempt: attempt) }) else { return }
        }
        do {
            try await openTransport()
            state.withLockedValue { $0.lastAttemptError = nil }
        } catch {
            let failure = Self.realtimeError(error)
            let actions = state.withLockedValue { shared in
                shared.lastAttemptError = failure
                return shared.machine.connectFailed(failure, now: timers.now)
            }
            await perform(actions)
            releaseStopWaiters()
        }
    }

    /// The end of a transport that was open.
    func transportEnded(generation: Int, error: RealtimeError?, allowReconnect: Bool) async {
        let (actions, outbox, handled) = state.withLockedValue { shared -> ([Lifecycle.Action], HubOutbox?, Bool) in
            guard shared.session?.generation == generation else { return ([], nil, false) }
            shared.session = nil
            defer {
                shared.replay = nil
                shared.outbox = nil
            }
            return (shared.machine.transportClosed(error, allowReconnect: allowReconnect, now: timers.now), shared.outbox, true)
        }
        outbox?.close(RealtimeError(.connectionClosed, "the connection was lost: \(error?.detail ?? "closed")"))
        await perform(actions)
        if handled { releaseStopWaiters() }
    }

    /// Why a call could not be sent on a connected session. An I/O failure there (a POST or a
    /// write cut short) means the connection was lost: `connectionClosed`, as for calls already
    /// pending, with the I/O error underneath.
    static func sendError(_ error: any Error, method: String) -> RealtimeError {
        let failure = realtimeError(error)
        switch failure.code {
        case .connectFailed, .timeout:
            return RealtimeError(.connectionClosed, "the connection was lost while sending '\(method)'", underlying: failure)
        default:
            return failure
        }
    }

    static func realtimeError(_ error: any Error) -> RealtimeError {
        if let error = error as? RealtimeError { return error }
        if error is CancellationError { return RealtimeError(.cancelled, "cancelled") }
        return RealtimeError(.connectFailed, Redaction.describe(error), underlying: error)
    }
}

extension Duration {
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

/// The error a hub method reported in its completion.
public struct HubInvocationError: Error, Sendable, CustomStringConvertible {
    /// The server's message (by default .NET sends a generic text unless detailed errors are on).
    public let message: String

    /// A readable summary, for logs and messages.
    public var description: String { "the hub method failed: \(message)" }
}

extension Array {
    /// The element at `index`, moved out, `placeholder` left in its place: taking each element of
    /// an array that is let go afterwards (a read's hub messages, the dispatcher's batch), without
    /// copying it.
    mutating func take(at index: Int, leaving placeholder: Element) -> Element {
        var element = placeholder
        swap(&element, &self[index])
        return element
    }
}
