import EventSourceClient
import Foundation
import Hummingbird
import Logging
import CoreMetrics
import NIOConcurrencyHelpers
import NIOCore
import Prometheus
import RealtimeCore
import ServiceLifecycle
import SignalRHub
import SocketIOEngine
import SpreadbotClient

/// Where the bridge reads from and writes to.
public struct BridgeConfiguration: Sendable {
    /// A Server-Sent Events stream; every event is forwarded.
    public var eventStreamURL: URL
    /// A Socket.IO server, the namespace to join and the event to forward.
    public var socketIOURL: String
    public var socketIONamespace = "/"
    public var socketIOEvent = "message"
    /// A SignalR hub and the client method whose invocations are forwarded (one string argument).
    public var signalRURL: String
    public var signalRMethod = "ReceiveMessage"
    /// The Spreadbot backend everything goes to, and the stream path it goes to.
    public var spreadbot: SpreadbotConfiguration
    public var spreadbotPath = "bridge"
    /// Where `/metrics` is served (port 0: any free port, see ``Bridge/metricsPort()``).
    public var metricsHost = "127.0.0.1"
    public var metricsPort = 9464
    /// How long a shutdown waits for forwarded messages the backend has not confirmed yet; what is
    /// still unconfirmed then is reported (logged, and counted in ``Bridge/Counts/unconfirmed``).
    /// Default 1.5 s, below every close timeout (5 s), so a SIGTERM does not wait for those.
    public var drainTimeout: Duration = .milliseconds(1500)

    public init(eventStreamURL: URL, socketIOURL: String, signalRURL: String, spreadbot: SpreadbotConfiguration) {
        self.eventStreamURL = eventStreamURL
        self.socketIOURL = socketIOURL
        self.signalRURL = signalRURL
        self.spreadbot = spreadbot
    }
}

/// Forwards what three realtime sources push (an SSE stream, a Socket.IO namespace, a SignalR hub)
/// to a Spreadbot path, with the metrics of every client on `/metrics`.
///
/// ``services`` are what a `ServiceGroup` runs, in the order that makes a graceful shutdown lose
/// nothing silently: the sources stop first, then the bridge waits until the backend confirmed
/// everything it accepted (at most ``BridgeConfiguration/drainTimeout``, reporting what was not),
/// then the Spreadbot client closes.
public final class Bridge: Service, Sendable {
    /// What was forwarded so far.
    public struct Counts: Sendable, Equatable {
        /// Messages received from a source and queued for the backend.
        public var accepted = 0
        /// Messages the backend confirmed (a 2xx answer to their `POST`).
        public var delivered = 0
        /// Messages that could not be queued or that failed after queueing, each logged with its error.
        public var failed = 0
        /// Accepted and neither confirmed nor failed (at a shutdown: not confirmed within the drain timeout).
        public var unconfirmed: Int { accepted - delivered - failed }
    }

    public let configuration: BridgeConfiguration
    public let registry: PrometheusCollectorRegistry
    public let runtime: RealtimeRuntime
    public let spreadbot: Spreadbot
    public let source: EventSource
    public let socketManager: SocketManager
    public let hub: HubConnection
    public let socket: SocketIOClient
    private let tally = NIOLockedValueBox(Counts())
    private let confirmations = NIOLockedValueBox<AsyncStream<SpreadbotDelivery>.Continuation?>(nil)
    private let boundPort = NIOLockedValueBox<Int?>(nil)
    private let portWaiters = NIOLockedValueBox<[CheckedContinuation<Int, Never>]>([])
    private let logger: Logger
    private let forwarded: CoreMetrics.Counter
    private let forwardFailures: CoreMetrics.Counter

    /// Makes the clients on one runtime whose metrics go to `registry`; nothing connects before
    /// the services run. `logger` is the bridge's own; `clientLogger` the clients' (the libraries
    /// log at `debug` and `trace`), the same by default.
    public init(
        configuration: BridgeConfiguration, logger: Logger = Logger(label: "realtime-bridge"), clientLogger: Logger? = nil,
        registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()
    ) {
        self.configuration = configuration
        self.registry = registry
        self.logger = logger
        let factory = PrometheusMetricsFactory(registry: registry)
        var runtime = RealtimeRuntime.shared.logging(to: clientLogger ?? logger)
        runtime.metricsFactory = factory
        self.runtime = runtime
        forwarded = CoreMetrics.Counter(label: "bridge_forwarded_total", factory: factory)
        forwardFailures = CoreMetrics.Counter(label: "bridge_forward_failures_total", factory: factory)

        var spreadbotConfiguration = configuration.spreadbot
        spreadbotConfiguration.runtime = runtime
        spreadbotConfiguration.acknowledgedSends = true  // delivered means the backend answered 2xx
        spreadbotConfiguration.clientLabel = "bridge"
        spreadbot = Spreadbot(configuration: spreadbotConfiguration)

        var sourceConfiguration = EventSourceConfiguration()
        sourceConfiguration.clientLabel = "bridge"
        source = EventSource(url: configuration.eventStreamURL, configuration: sourceConfiguration, runtime: runtime)

        var socketConfiguration = SocketIOConfiguration()
        socketConfiguration.runtime = runtime
        socketConfiguration.clientLabel = "bridge"
        socketManager = SocketManager(url: configuration.socketIOURL, configuration: socketConfiguration)
        socket = socketManager.socket(forNamespace: configuration.socketIONamespace)

        hub = HubConnectionBuilder()
            .withUrl(url: configuration.signalRURL)
            .withAutomaticReconnect()
            .withRuntime(runtime)
            .withOptions { $0.clientLabel = "bridge" }
            .build()
    }

    /// What the service group runs, in order (it stops them in reverse order).
    public var services: [any Service] {
        [spreadbot, self, metricsServer(), source, socketManager, hub]
    }

    /// The counts so far.
    public var counts: Counts { tally.withLockedValue { $0 } }

    /// The port `/metrics` listens on, once it listens.
    public func metricsPort() async -> Int {
        await withCheckedContinuation { continuation in
            let port = boundPort.withLockedValue { $0 }
            if let port { continuation.resume(returning: port) } else { portWaiters.withLockedValue { $0.append(continuation) } }
        }
    }

    /// Subscribes to every source and forwards until the graceful shutdown; then waits for the
    /// backend to confirm what was accepted (at most the drain timeout) and reports the rest.
    public func run() async throws {
        let (deliveries, confirmations) = AsyncStream<SpreadbotDelivery>.makeStream()
        self.confirmations.withLockedValue { $0 = confirmations }
        spreadbot.establishConnection(path: configuration.spreadbotPath)
        let event = configuration.socketIOEvent
        socket.on(event) { [weak self] received in
            self?.forward(source: "socketio", event: event, data: .array(received.arguments))
        }
        let method = configuration.signalRMethod
        hub.on(method) { [weak self] (text: String) in
            self?.forward(source: "signalr", event: method, data: .string(text))
        }
        await withTaskGroup(of: Void.self) { group in
            // Confirms deliveries in the order they were queued (sends go out in that order).
            group.addTask {
                for await delivery in deliveries {
                    do {
                        try await delivery.delivered()
                        self.tally.withLockedValue { $0.delivered += 1 }
                    } catch {
                        self.failed(error)
                    }
                }
            }
            group.addTask {
                do {
                    try await self.socket.connect()
                } catch {
                    self.logger.warning("Socket.IO did not connect", metadata: ["error": "\(error)"])
                }
            }
            do {
                // Ends when the source closes (at a shutdown it is stopped before the bridge).
                for try await message in self.source.events {
                    self.forward(source: "sse", event: message.type, data: .string(message.data))
                }
            } catch {
                logger.warning("the event stream failed", metadata: ["error": "\(error)"])
            }
            // The other sources keep forwarding until the shutdown reaches the bridge, after them.
            try? await gracefulShutdown()
            self.confirmations.withLockedValue { $0?.finish() }
            let timeout = configuration.drainTimeout
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()  // the confirmations ended, or the drain timed out
            group.cancelAll()
        }
        let unconfirmed = counts.unconfirmed
        if unconfirmed > 0 {
            logger.error("messages not confirmed by the backend at shutdown", metadata: ["count": "\(unconfirmed)"])
            spreadbot.closeConnection()  // the rest fails now instead of waiting for the client's own drain
        }
    }

    /// Queues one message for the backend.
    func forward(source name: String, event: String, data: JSONValue) {
        let body: JSONValue = ["source": .string(name), "event": .string(event), "data": data]
        do {
            let delivery = try spreadbot.enqueue(.text(body.jsonString))
            tally.withLockedValue { $0.accepted += 1 }
            forwarded.increment()
            confirmations.withLockedValue { _ = $0?.yield(delivery) }
        } catch {
            failed(error)
        }
    }

    private func failed(_ error: any Error) {
        tally.withLockedValue { $0.failed += 1 }
        forwardFailures.increment()
        logger.error("a message could not be forwarded", metadata: ["error": "\(error)"])
    }

    private func metricsServer() -> some Service {
        let router = Router()
        let registry = self.registry
        router.get("metrics") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: .init(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
        }
        return Application(
            router: router,
            configuration: .init(address: .hostname(configuration.metricsHost, port: configuration.metricsPort), serverName: nil),
            onServerRunning: { [weak self] channel in
                guard let self, let port = channel.localAddress?.port else { return }
                let waiters = self.boundPort.withLockedValue { bound in
                    bound = port
                    return self.portWaiters.withLockedValue { waiters in
                        defer { waiters = [] }
                        return waiters
                    }
                }
                for waiter in waiters { waiter.resume(returning: port) }
            },
            logger: logger)
    }
}
