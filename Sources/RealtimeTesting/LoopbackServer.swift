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

    /// `http://127.0.0.1:<port>` (or https).
    public var baseURL: String { "\(scheme)://127.0.0.1:\(port)" }
    /// The same with `ws`/`wss`.
    public var webSocketBaseURL: String { "\(scheme == "https" ? "wss" : "ws")://127.0.0.1:\(port)" }

    private init(port: Int, scheme: String, task: Task<Void, any Error>) {
        self.port = port
        self.scheme = scheme
        self.task = task
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
        let app = Application(
            router: responder,
            server: server,
            configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: nil),
            onServerRunning: { channel in
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
        return LoopbackServer(port: port, scheme: secure ? "https" : "http", task: task)
    }

    /// Stops listening, closes open connections and waits until the server is down.
    public func stop() async {
        task.cancel()
        _ = await task.result
    }
}

public struct LoopbackServerError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
