public import Hummingbird
public import HummingbirdCore
public import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle

/// A Hummingbird application bound to 127.0.0.1 on an ephemeral port, started and stopped by a test.
public final class LoopbackServer: Sendable {
    /// The port the server listens on.
    public let port: Int
    /// `http` or `https`.
    public let scheme: String
    private let task: Task<Void, any Error>
    private let listener: NIOLockedValueBox<(any Channel)?>
    private let connections: ConnectionTracker

    /// `http://127.0.0.1:<port>` (or https).
    public var baseURL: String { "\(scheme)://127.0.0.1:\(port)" }
    /// The same with `ws`/`wss`.
    public var webSocketBaseURL: String { "\(scheme == "https" ? "wss" : "ws")://127.0.0.1:\(port)" }

    private init(
        port: Int, scheme: String, task: Task<Void, any Error>, listener: NIOLockedValueBox<(any Channel)?>,
        connections: ConnectionTracker
    ) {
        self.port = port
        self.scheme = scheme
        self.task = task
        self.listener = listener
        self.connections = connections
    }

    /// Starts `responder` behind `server` (http1, TLS, WebSocket upgrade...) and returns once it listens,
    /// on `port` (0: an ephemeral port).
    public static func start<Responder: HTTPResponderBuilder>(
        responder: Responder,
        server: HTTPServerBuilder = .http1(),
        secure: Bool = false,
        port: Int = 0,
        logger: Logger = Logger(label: "realtime-testing", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async throws -> LoopbackServer where Responder.Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        let (portStream, portContinuation) = AsyncStream<Int>.makeStream()
        let listener = NIOLockedValueBox<(any Channel)?>(nil)
        let connections = ConnectionTracker()
        let app = Application(
            router: responder,
            server: server,
            configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: nil),
            onServerRunning: { channel in
                listener.withLockedValue { $0 = channel }
                // Sees every accepted connection before the server's accept handler does.
                try? await channel.pipeline.addHandler(connections, position: .first).get()
                portContinuation.yield(channel.localAddress?.port ?? 0)
                portContinuation.finish()
            },
            logger: logger
        )
        // The server runs in the background of a test until stop() cancels and awaits this task.
        let task = Task {
            defer { portContinuation.finish() }
            try await app.run()
        }
        var iterator = portStream.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            if case .failure(let error) = await task.result {
                throw LoopbackServerError(message: "the loopback server did not start: \(error)")
            }
            throw LoopbackServerError(message: "the loopback server did not start")
        }
        return LoopbackServer(port: port, scheme: secure ? "https" : "http", task: task, listener: listener, connections: connections)
    }

    /// Stops listening, closes open connections and waits until the server is down.
    ///
    /// Connections are dropped as a server that goes away drops them (TCP close, no WebSocket close
    /// frame or HTTP response). The serving task is not cancelled: it ends by itself once the
    /// listening socket and every connection are closed. Cancelling it had two failures here:
    /// Hummingbird waits for a connection's WebSocket upgrade on a future that cancellation does not
    /// reach, so `stop()` hung for as long as a client kept an idle connection open; and
    /// connections accepted but not yet handed to the server were dropped with their
    /// `NIOAsyncChannel` unfinished, which traps ("Deinited NIOAsyncWriter without calling
    /// finish()"; swift-nio issues 2637 and 3481) and crashed a full test run.
    ///
    /// The same trap waits for a listener closed while a connection it accepted is still being set
    /// up (its channel initializer runs on another event loop; a full run hit it once with closing
    /// the listener at once). So the listener first stops accepting, and is closed on its own event
    /// loop only when no accepted connection is still being set up.
    public func stop() async {
        connections.stopAccepting()
        if let channel = listener.withLockedValue({ $0 }) {
            let giveUp = ContinuousClock.now + .seconds(2)
            while true {
                let closed = (try? await channel.eventLoop.submit { [connections] () -> Bool in
                    guard connections.settingUp == 0 || ContinuousClock.now >= giveUp else { return false }
                    channel.close(promise: nil)
                    return true
                }.get()) ?? true
                if closed { break }
                try? await Task.sleep(for: .milliseconds(1))
            }
            try? await channel.closeFuture.get()
        }
        // The listener is closed: no connection is accepted after this.
        connections.closeAll()
        // Bounded: a server that does not end within 10 s is cancelled (and reported by the hang of
        // the test that waits for it, rather than by this call never returning).
        let ended = await withTaskGroup(of: Bool.self) { group in
            group.addTask { _ = await self.task.result; return true }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        if !ended {
            task.cancel()
            _ = await task.result
        }
    }
}

/// Records the connections a server accepts (on the listening channel's pipeline, where accepted
/// channels pass as inbound reads) so that `stop()` can close the ones still open, and stops the
/// accepting on request (a listening channel accepts only when a `read` reaches its head, and this
/// handler sits next to the head).
final class ConnectionTracker: ChannelDuplexHandler, Sendable {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private let state = NIOLockedValueBox<(open: [ObjectIdentifier: any Channel], accepting: Bool)>(([:], true))

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let channel = unwrapInboundIn(data)
        let key = ObjectIdentifier(channel)
        state.withLockedValue { $0.open[key] = channel }
        channel.closeFuture.whenComplete { [state] _ in
            state.withLockedValue { _ = $0.open.removeValue(forKey: key) }
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        if state.withLockedValue({ $0.accepting }) { context.read() }
    }

    func stopAccepting() { state.withLockedValue { $0.accepting = false } }

    /// Accepted connections not active yet: their set-up (channel initializer, registration) is
    /// still under way.
    var settingUp: Int { state.withLockedValue { $0.open.values.filter { !$0.isActive }.count } }

    func closeAll() {
        let channels = state.withLockedValue { Array($0.open.values) }
        for channel in channels { channel.close(promise: nil) }
    }
}

/// The server could not start.
public struct LoopbackServerError: Error, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    /// A readable summary, for logs and messages.
    public var description: String { message }
}
