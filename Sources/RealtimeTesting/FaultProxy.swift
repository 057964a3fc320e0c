import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP proxy on 127.0.0.1 that forwards to a target and injects network faults on command, while
/// traffic flows: for proving what a client promises when connections are cut, stall or slow down.
///
/// ```swift
/// let proxy = try await FaultProxy.start(targetPort: server.port)
/// defer { Task { await proxy.stop() } }
/// let client = connect(to: "http://127.0.0.1:\(proxy.port)")
/// proxy.inject(.cutAfter(bytes: 40_000, .clientToTarget, .reset))  // cut in the middle of a burst
/// ```
///
/// Every connection accepted is forwarded over its own connection to the target, on the same event
/// loop, with backpressure: the proxy reads from one side only while the other side can take bytes,
/// so it buffers at most about 1 MiB per direction and connection (more only while latency is set).
///
/// What each ``Fault`` does:
/// - ``Fault/cut(_:)``: closes every open connection (both halves) now. `.fin` closes normally;
///   `.reset` sets `SO_LINGER` to zero first, so the peers see a TCP reset.
/// - ``Fault/cutAfter(bytes:_:_:)``: forwards `bytes` more bytes in the given directions, counted
///   over all connections from the moment of the call, then cuts every connection. The last byte
///   forwarded is the `bytes`-th; nothing after it passes.
/// - ``Fault/stall(_:for:)``: forwards nothing in those directions (and stops reading, so the
///   sender's socket buffers fill up as with a peer that stopped reading) until ``resume()`` or the
///   duration passes; what was held is then forwarded in order.
/// - ``Fault/latency(_:_:for:)``: delays every chunk read in those directions by that time, in order,
///   until ``resume()`` or the duration passes.
/// - ``Fault/refuse(for:)``: closes the listening socket, so new connections are refused
///   (`ECONNREFUSED`) while open ones go on; listens again on the same port afterwards. Connections
///   the kernel had completed but the proxy not yet accepted are reset. ``refuseConnections(for:)``
///   does the same and returns once the listener is closed.
///
/// Started with a ``ConnectFront``, the proxy is an HTTP proxy as clients see one: each connection
/// first sends a `CONNECT` request, which the proxy answers as ``ConnectFront/answer`` says (a
/// tunnel, a refusal with a status, a 407 when the credentials are wrong, silence, a close) before
/// it forwards anything. Whatever authority the request names, the tunnel leads to the target (the
/// proxy never connects anywhere else). ``connectRequests`` lists the requests it saw.
///
/// ``startRandomFaults(_:)`` runs a ``RandomFaultSchedule``: the same seed gives the same faults at
/// the same offsets. ``statistics`` counts connections and forwarded bytes; ``faultLog`` lists the
/// faults applied, in order.
public final class FaultProxy: Sendable {
    /// The port the proxy listens on (127.0.0.1).
    public let port: Int
    /// Where connections are forwarded.
    public let targetHost: String
    /// The port of the server behind the proxy (``retarget(port:)`` changes it for new connections).
    public var targetPort: Int { state.withLockedValue { $0.targetPort ?? initialTargetPort } }
    private let initialTargetPort: Int

    let state: NIOLockedValueBox<ProxyState>

    /// Directions of traffic through the proxy.
    public struct Directions: OptionSet, Sendable, Hashable, CustomStringConvertible {
        /// The set's raw bits.
        public let rawValue: Int
        /// Makes the set from its raw bits.
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// Bytes the client sends to the target.
        public static let clientToTarget = Directions(rawValue: 1)
        /// Bytes the target sends to the client.
        public static let targetToClient = Directions(rawValue: 2)
        /// Both directions.
        public static let both: Directions = [.clientToTarget, .targetToClient]

        /// A readable summary, for logs and messages.
        public var description: String {
            switch self {
            case .clientToTarget: "clientToTarget"
            case .targetToClient: "targetToClient"
            case .both: "both"
            default: "none"
            }
        }
    }

    /// How a connection is cut.
    public enum CutMode: Sendable, Hashable {
        /// A normal close: the peers read end-of-stream.
        case fin
        /// An abortive close: the peers see `ECONNRESET`.
        case reset
    }

    /// A fault the proxy can apply. See ``FaultProxy`` for what each one does.
    public enum Fault: Sendable, Hashable, CustomStringConvertible {
        /// Cut every open connection now.
        case cut(CutMode)
        /// Cut every connection once this many more bytes went through in the directions.
        case cutAfter(bytes: Int, Directions, CutMode)
        /// `nil`: until ``FaultProxy/resume()``.
        case stall(Directions, for: Duration?)
        /// `nil`: until ``FaultProxy/resume()``.
        case latency(Duration, Directions, for: Duration?)
        /// `nil`: until ``FaultProxy/acceptConnections()``.
        case refuse(for: Duration?)

        /// A readable summary, for logs and messages.
        public var description: String {
            switch self {
            case .cut(let mode): "cut(\(mode))"
            case .cutAfter(let bytes, let directions, let mode): "cutAfter(\(bytes) bytes, \(directions), \(mode))"
            case .stall(let directions, let duration): "stall(\(directions), for: \(duration.map { "\($0)" } ?? "until resumed"))"
            case .latency(let latency, let directions, let duration):
                "latency(\(latency), \(directions), for: \(duration.map { "\($0)" } ?? "until resumed"))"
            case .refuse(let duration): "refuse(for: \(duration.map { "\($0)" } ?? "until accepting"))"
            }
        }
    }

    /// How a proxy started with a ``ConnectFront`` answers `CONNECT` requests.
    public enum ConnectAnswer: Sendable, Hashable {
        /// `200 Connection established`, then the tunnel (or 407 while the credentials are wrong).
        case open
        /// This status (403, 502, ...), and the connection closed.
        case refuse(status: Int)
        /// No answer at all: the client waits for its own timeout.
        case stall
        /// The connection closed without an answer.
        case close
    }

    /// What makes the proxy an HTTP `CONNECT` proxy.
    public struct ConnectFront: Sendable, Hashable {
        /// The Basic credentials the proxy requires (`Proxy-Authorization`); nil: none.
        public var username: String?
        /// The password that goes with ``username``.
        public var password: String?
        /// How requests are answered (it can change later: ``FaultProxy/answerConnect(_:)``).
        public var answer: ConnectAnswer

        /// Makes a front; every parameter is the property of the same name.
        public init(username: String? = nil, password: String? = nil, answer: ConnectAnswer = .open) {
            self.username = username
            self.password = password
            self.answer = answer
        }
    }

    /// A `CONNECT` request the proxy saw.
    public struct ConnectRequest: Sendable, Hashable {
        /// The authority asked for (`host:port`).
        public var authority: String
        /// The `Proxy-Authorization` value sent, if any.
        public var proxyAuthorization: String?
        /// The status answered (nil: none, for ``ConnectAnswer/stall`` and ``ConnectAnswer/close``).
        public var status: Int?
    }

    /// Counters since the proxy started.
    public struct Statistics: Sendable, Hashable {
        /// Connections accepted from clients.
        public var connectionsAccepted = 0
        /// Connections open now.
        public var connectionsOpen = 0
        /// Connections closed by a fault (``Fault/cut(_:)`` or ``Fault/cutAfter(bytes:_:_:)``).
        public var connectionsCut = 0
        /// Connections whose target could not be reached.
        public var targetConnectFailures = 0
        /// Bytes forwarded from clients to the target.
        public var bytesToTarget = 0
        /// Bytes forwarded from the target to clients.
        public var bytesToClient = 0
        /// Bytes read from the target and held for clients (``hold(_:)``), not forwarded yet.
        public var bytesHeldForClients = 0
    }

    private init(port: Int, targetHost: String, targetPort: Int, state: NIOLockedValueBox<ProxyState>) {
        self.port = port
        self.targetHost = targetHost
        self.initialTargetPort = targetPort
        self.state = state
    }

    /// Starts listening on 127.0.0.1 (`port` 0: an ephemeral port) and forwards to the target;
    /// with `connectFront`, as an HTTP `CONNECT` proxy.
    public static func start(
        targetHost: String = "127.0.0.1", targetPort: Int, port: Int = 0, connectFront: ConnectFront? = nil
    ) async throws -> FaultProxy {
        let state = NIOLockedValueBox(ProxyState(connectFront: connectFront))
        let box = ProxyBox()
        let listener = try await bind(port: port, box: box)
        let proxy = FaultProxy(
            port: listener.localAddress?.port ?? 0, targetHost: targetHost, targetPort: targetPort, state: state
        )
        box.proxy.withLockedValue { $0.value = proxy }
        state.withLockedValue {
            $0.listener = listener
            $0.box = box
        }
        return proxy
    }

    /// `http://127.0.0.1:<port>` (or another scheme, such as `ws`).
    public func url(scheme: String = "http") -> String { "\(scheme)://127.0.0.1:\(port)" }

    /// Connections and bytes so far.
    public var statistics: Statistics {
        state.withLockedValue {
            var statistics = $0.statistics
            statistics.connectionsOpen = $0.connections.count
            return statistics
        }
    }

    /// The `CONNECT` requests seen so far, in order (a proxy with a ``ConnectFront``).
    public var connectRequests: [ConnectRequest] { state.withLockedValue { $0.connectRequests } }

    /// Changes how later `CONNECT` requests are answered.
    public func answerConnect(_ answer: ConnectAnswer) {
        state.withLockedValue { $0.connectFront?.answer = answer }
    }

    /// How a `CONNECT` request is answered (nil: stall), recorded.
    func answer(connect authority: String, proxyAuthorization: String?) -> (status: Int?, close: Bool) {
        state.withLockedValue { state in
            guard let front = state.connectFront else { return (nil, true) }
            var result: (status: Int?, close: Bool)
            switch front.answer {
            case .open:
                let expected = front.username.map { user in
                    "Basic " + Data("\(user):\(front.password ?? "")".utf8).base64EncodedString()
                }
                result = expected == nil || expected == proxyAuthorization ? (200, false) : (407, true)
            case .refuse(let status): result = (status, true)
            case .stall: result = (nil, false)
            case .close: result = (nil, true)
            }
            state.connectRequests.append(ConnectRequest(authority: authority, proxyAuthorization: proxyAuthorization, status: result.status))
            return result
        }
    }

    /// Whether connections start with a `CONNECT` request.
    var hasConnectFront: Bool { state.withLockedValue { $0.connectFront != nil } }

    /// The faults applied so far, in order (including those of a random schedule).
    public var faultLog: [Fault] { state.withLockedValue { $0.log } }

    /// Applies a fault now.
    public func inject(_ fault: Fault) {
        let connections: [ProxyConnection] = state.withLockedValue { state in
            state.log.append(fault)
            switch fault {
            case .cut:
                return state.connections.values.map { $0 }
            case .cutAfter(let bytes, let directions, let mode):
                state.trigger = CutTrigger(remaining: max(bytes, 0), directions: directions, mode: mode)
                return bytes <= 0 ? state.connections.values.map { $0 } : []
            case .stall(let directions, _):
                state.stalled.formUnion(directions)
                return []
            case .latency(let latency, let directions, _):
                if directions.contains(.clientToTarget) { state.latency[0] = latency }
                if directions.contains(.targetToClient) { state.latency[1] = latency }
                return []
            case .refuse:
                return []
            }
        }
        switch fault {
        case .cut(let mode):
            cut(connections, mode: mode)
        case .cutAfter(let bytes, _, let mode):
            if bytes <= 0 {
                state.withLockedValue { $0.trigger = nil }
                cut(connections, mode: mode)
            }
        case .stall(let directions, let duration):
            if let duration { after(duration) { $0.end(stall: directions, latency: []) } }
        case .latency(_, let directions, let duration):
            if let duration { after(duration) { $0.end(stall: [], latency: directions) } }
        case .refuse(let duration):
            _ = stopListening()
            // Listening again is async and the timer's action is not.
            if let duration { after(duration) { proxy in Task { try? await proxy.acceptConnections() } } }
        }
    }

    /// Refuses new connections (``Fault/refuse(for:)``) and returns once the listening socket is closed,
    /// so a connection attempted afterwards is refused for certain.
    public func refuseConnections(for duration: Duration? = nil) async {
        state.withLockedValue { $0.log.append(.refuse(for: duration)) }
        try? await stopListening()?.get()
        // As in inject(_:): listening again is async and the timer's action is not.
        if let duration { after(duration) { proxy in Task { try? await proxy.acceptConnections() } } }
    }

    private func stopListening() -> EventLoopFuture<Void>? {
        let listener = state.withLockedValue { state -> (any Channel)? in
            defer { state.listener = nil }
            state.refusing = true
            return state.listener
        }
        let port = port
        return listener?.close().map { [weak self] in
            let placeholder = RefusingPort(port: port)
            let keep = self?.state.withLockedValue { state -> Bool in
                guard state.refusing, !state.stopped, state.placeholder == nil else { return false }
                state.placeholder = placeholder
                return true
            } ?? false
            if !keep { placeholder?.release() }
        }
    }

    private func releasePlaceholder() {
        state.withLockedValue { state -> RefusingPort? in
            defer { state.placeholder = nil }
            return state.placeholder
        }?.release()
    }

    /// Forwards new connections to `port` from now on (a server restarted on another port, as one
    /// behind a load balancer comes back); open connections stay with the old one.
    public func retarget(port: Int) {
        state.withLockedValue { $0.targetPort = port }
    }

    /// Cuts every open connection now (``Fault/cut(_:)``).
    public func cutAll(_ mode: CutMode = .fin) { inject(.cut(mode)) }

    /// Reads what comes in `directions` but forwards nothing until ``resume()``, which lets it all
    /// through at once: a burst the target wrote piece by piece reaches the other side together.
    /// ``Statistics/bytesHeldForClients`` says how much waits (to know the target's writes are in).
    public func hold(_ directions: Directions) {
        state.withLockedValue { $0.held.formUnion(directions) }
    }

    /// Ends stalls, holds and latency in every direction; held bytes are forwarded in order.
    public func resume() {
        end(stall: .both, latency: .both)
    }

    private func end(stall: Directions, latency: Directions) {
        let connections = state.withLockedValue { state in
            state.stalled.subtract(stall)
            state.held.subtract(stall)
            if latency.contains(.clientToTarget) { state.latency[0] = .zero }
            if latency.contains(.targetToClient) { state.latency[1] = .zero }
            return state.connections.values.map { $0 }
        }
        for connection in connections {
            connection.eventLoop.execute { connection.resumeAll() }
        }
    }

    /// Listens again after ``Fault/refuse(for:)``, on the same port.
    public func acceptConnections() async throws {
        let box: ProxyBox? = state.withLockedValue { state in
            guard state.refusing, !state.stopped else { return nil }
            state.refusing = false
            return state.box
        }
        guard let box else { return }
        releasePlaceholder()
        let listener = try await Self.bind(port: port, box: box)
        let keep = state.withLockedValue { state -> Bool in
            guard !state.stopped, !state.refusing else { return false }
            state.listener = listener
            return true
        }
        if !keep { try? await listener.close() }
    }

    /// Starts applying `schedule`'s faults (replacing a schedule already running).
    public func startRandomFaults(_ schedule: RandomFaultSchedule) {
        let plan = schedule.plan()
        let task = Task { [weak self] in
            let start = ContinuousClock.now
            for step in plan {
                try await Task.sleep(until: start.advanced(by: step.at), clock: .continuous)
                guard let self else { return }
                self.inject(step.fault)
            }
        }
        let previous = state.withLockedValue { state in
            defer { state.randomFaults = task }
            return state.randomFaults
        }
        previous?.cancel()
    }

    /// Stops a random schedule; faults it applied stay until resumed.
    public func stopRandomFaults() {
        state.withLockedValue { state in
            defer { state.randomFaults = nil }
            return state.randomFaults
        }?.cancel()
    }

    /// Stalls everything in both directions, cuts every connection, and returns once a new one was
    /// accepted: a client's reconnect attempt, now hanging in the stall (the state in which to test
    /// what stopping a client during an attempt does). ``resume()`` lets the stalled bytes through.
    public func cutAndStallTheNextAttempt(_ mode: CutMode = .reset, timeout: Duration = .seconds(30)) async throws {
        let accepted = statistics.connectionsAccepted
        inject(.stall(.both, for: nil))
        inject(.cut(mode))
        try await waitForConnections(accepted + 1, timeout: timeout)
    }

    /// Waits until at least `count` connections have been accepted (for example a client's reconnection).
    public func waitForConnections(_ count: Int, timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while statistics.connectionsAccepted < count {
            guard ContinuousClock.now < deadline else {
                throw FaultProxyError(message: "waited \(timeout) for \(count) connections; \(statistics.connectionsAccepted) accepted")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Stops listening, cuts every connection and waits until they are closed.
    public func stop() async {
        let (listener, connections, random) = state.withLockedValue { state in
            state.stopped = true
            defer { state.listener = nil }
            return (state.listener, state.connections.values.map { $0 }, state.randomFaults)
        }
        random?.cancel()
        try? await listener?.close()
        releasePlaceholder()
        cut(connections, mode: .fin, countAsFault: false)
        for connection in connections {
            try? await connection.client.closeFuture.get()
        }
    }

    // MARK: - Internals

    private func cut(_ connections: [ProxyConnection], mode: CutMode, countAsFault: Bool = true) {
        if countAsFault {
            state.withLockedValue { $0.statistics.connectionsCut += connections.count }
        }
        for connection in connections {
            connection.eventLoop.execute { connection.close(mode: mode) }
        }
    }

    /// A fault's end, while the test goes on (real time: the proxy stands for the network); it holds
    /// the proxy weakly, so a stopped proxy is not kept alive by it.
    private func after(_ duration: Duration, _ body: @escaping @Sendable (FaultProxy) -> Void) {
        Task { [weak self] in
            try? await Task.sleep(for: duration)
            if let self { body(self) }
        }
    }

    private static func bind(port: Int, box: ProxyBox) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                guard let proxy = box.proxy.withLockedValue({ $0.value }) else { return channel.close() }
                return proxy.accepted(channel)
            }
            .bind(host: "127.0.0.1", port: port).get()
    }

    private func accepted(_ client: any Channel) -> EventLoopFuture<Void> {
        let connection = ProxyConnection(proxy: self, client: client)
        let accepted = state.withLockedValue { state -> Bool in
            // A connection the kernel completed just before the listener closed is reset.
            guard !state.stopped, !state.refusing else { return false }
            state.statistics.connectionsAccepted += 1
            state.connections[ObjectIdentifier(connection)] = connection
            return true
        }
        guard accepted else {
            if let provider = client as? any SocketOptionProvider {
                return provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).flatMap { client.close() }
            }
            return client.close()
        }
        client.closeFuture.whenComplete { [weak self] _ in
            self?.state.withLockedValue {
                $0.connections.removeValue(forKey: ObjectIdentifier(connection))
                $0.doomed.remove(ObjectIdentifier(connection))
            }
        }
        do {
            try client.pipeline.syncOperations.addHandler(ProxySideHandler(connection: connection, side: 0))
        } catch {
            return client.eventLoop.makeFailedFuture(error)
        }
        return client.eventLoop.makeSucceededVoidFuture()
    }

    /// Called by connections for every chunk before it is forwarded: how many of its bytes may pass,
    /// and whether the cut-after trigger fired (then every connection is to be cut after them).
    func consume(_ count: Int, direction: Int, connection: ObjectIdentifier) -> (allowed: Int, fire: CutMode?) {
        state.withLockedValue { state in
            // A connection the trigger has condemned forwards nothing more while its cut is on the way.
            if state.doomed.contains(connection) { return (0, nil) }
            let bit: Directions = direction == 0 ? .clientToTarget : .targetToClient
            var allowed = count
            var fire: CutMode?
            if var trigger = state.trigger, trigger.directions.contains(bit) {
                allowed = min(count, trigger.remaining)
                trigger.remaining -= allowed
                if trigger.remaining == 0 {
                    fire = trigger.mode
                    state.trigger = nil
                    state.doomed = Set(state.connections.keys)
                } else {
                    state.trigger = trigger
                }
            }
            if direction == 0 { state.statistics.bytesToTarget += allowed } else { state.statistics.bytesToClient += allowed }
            return (allowed, fire)
        }
    }

    func conditions(direction: Int) -> (stalled: Bool, latency: Duration) {
        state.withLockedValue { state in
            let bit: Directions = direction == 0 ? .clientToTarget : .targetToClient
            return (state.stalled.contains(bit), state.latency[direction])
        }
    }

    /// Whether bytes in `direction` are read but held (``hold(_:)``).
    func isHeld(direction: Int) -> Bool {
        state.withLockedValue { $0.held.contains(direction == 0 ? .clientToTarget : .targetToClient) }
    }

    /// Bytes for clients came into (positive) or left (negative) a connection's queue.
    func noteQueuedForClient(_ count: Int) {
        state.withLockedValue { $0.statistics.bytesHeldForClients += count }
    }

    func fireCut(_ mode: CutMode) {
        cut(state.withLockedValue { state in state.doomed.compactMap { state.connections[$0] } }, mode: mode)
    }

    func targetConnectFailed() {
        state.withLockedValue { $0.statistics.targetConnectFailures += 1 }
    }
}

/// The proxy could not start or reach its target.
public struct FaultProxyError: Error, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    /// Makes the error with its message.
    public init(message: String) { self.message = message }
    /// A readable summary, for logs and messages.
    public var description: String { message }
}

struct CutTrigger {
    var remaining: Int
    var directions: FaultProxy.Directions
    var mode: FaultProxy.CutMode
}

/// Lets the listener's initializer reach the proxy, which exists only once the listener is bound.
final class ProxyBox: Sendable {
    struct Weak { weak var value: FaultProxy? }
    let proxy = NIOLockedValueBox(Weak())
}

struct ProxyState {
    /// Set by ``FaultProxy/retarget(port:)``.
    var targetPort: Int?
    var connectFront: FaultProxy.ConnectFront?
    var connectRequests: [FaultProxy.ConnectRequest] = []
    var listener: (any Channel)?
    /// While refusing: a socket bound to the port without listening, so a connect is refused by the
    /// kernel and no other server (another test's, on an ephemeral port) can take the port meanwhile.
    var placeholder: RefusingPort?
    var box: ProxyBox?
    var connections: [ObjectIdentifier: ProxyConnection] = [:]
    var statistics = FaultProxy.Statistics()
    var log: [FaultProxy.Fault] = []
    var trigger: CutTrigger?
    /// Connections a fired trigger is cutting: they forward nothing more.
    var doomed: Set<ObjectIdentifier> = []
    var stalled: FaultProxy.Directions = []
    /// Directions whose bytes are read and queued but not forwarded (``FaultProxy/hold(_:)``).
    var held: FaultProxy.Directions = []
    /// Index 0: client to target; 1: target to client.
    var latency: [Duration] = [.zero, .zero]
    var refusing = false
    var stopped = false
    var randomFaults: Task<Void, any Error>?
}

