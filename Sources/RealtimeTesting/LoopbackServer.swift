public import Hummingbird
public import HummingbirdCore
public import Logging
import NIOConcurrencyHelpers
public import NIOCore
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
    public func stop() async {
        if let channel = listener.withLockedValue({ $0 }) {
            try? await channel.close()
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
/// channels pass as inbound reads) so that `stop()` can close the ones still open.
final class ConnectionTracker: ChannelInboundHandler, Sendable {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    private let open = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let channel = unwrapInboundIn(data)
        let key = ObjectIdentifier(channel)
        open.withLockedValue { $0[key] = channel }
        channel.closeFuture.whenComplete { [open] _ in
            open.withLockedValue { _ = $0.removeValue(forKey: key) }
        }
        context.fireChannelRead(data)
    }

    func closeAll() {
        let channels = open.withLockedValue { Array($0.values) }
        for channel in channels { channel.close(promise: nil) }
    }
}

public struct LoopbackServerError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
