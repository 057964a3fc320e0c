import Foundation
import Testing

/// One cell of the fault matrix: a protocol and transport, plain or TLS, direct or through a
/// proxy, and a fault a real network or server makes.
struct FaultCell: Sendable, Hashable, CustomTestStringConvertible {
    /// A protocol with one of its transports.
    enum Subject: String, CaseIterable, Sendable {
        case socketIOWebSocket = "Socket.IO websocket"
        case socketIOPolling = "Socket.IO polling"
        case socketIOUpgrade = "Socket.IO polling then upgrade"
        case signalRWebSocket = "SignalR websocket"
        case signalRSSE = "SignalR SSE"
        case signalRLongPolling = "SignalR long polling"
        case eventSource = "SSE"
        case spreadbotWebSocket = "Spreadbot websocket"
        case spreadbotSSE = "Spreadbot SSE"

        var isSocketIO: Bool { [.socketIOWebSocket, .socketIOPolling, .socketIOUpgrade].contains(self) }
        var isSignalR: Bool { [.signalRWebSocket, .signalRSSE, .signalRLongPolling].contains(self) }
        var isSpreadbot: Bool { [.spreadbotWebSocket, .spreadbotSSE].contains(self) }
    }

    enum Security: String, CaseIterable, Sendable { case plain, tls }

    /// How the client reaches the server: directly, through tinyproxy (an HTTP proxy: `CONNECT`
    /// for WebSockets and TLS, absolute-form requests for plain http) or through dante (SOCKS5).
    enum Route: String, CaseIterable, Sendable {
        case direct
        case httpProxy = "HTTP proxy"
        case socks5 = "SOCKS5"
    }

    enum Fault: String, CaseIterable, Sendable {
        /// Every connection between the client (or its proxy) and the server reset.
        case reset = "RST"
        /// Every connection closed with a FIN, no TLS close, no WebSocket close.
        case fin = "FIN"
        /// A relay process in front of the server killed with SIGKILL, restarted a second later.
        case relayKilled = "relay killed"
        /// Nothing passes either way any more (a NAT that forgot the flow), until the client gives
        /// up on the connection by its own keep-alive.
        case stall = "silent stall"
        /// The client's proxy killed and started again on its port.
        case proxyRestart = "proxy restart"
        /// The server stopped and another started in its place, knowing no session.
        case serverRestart = "server restart"
        /// A message over the server's own limit.
        case payloadLimit = "server's payload limit"
        /// A long poll held longer than the client's server timeout, with no keep-alive (the
        /// transport has none).
        case longPollSilence = "long poll silent past the keep-alive"
    }

    let subject: Subject
    let security: Security
    let route: Route
    let fault: Fault

    var testDescription: String { "\(subject.rawValue), \(security.rawValue), \(route.rawValue): \(fault.rawValue)" }

    /// Whether the fault means anything for this cell (and why not, for the docs).
    static func notApplicable(_ subject: Subject, _ route: Route, _ fault: Fault) -> String? {
        switch fault {
        case .proxyRestart where route == .direct:
            return "no proxy"
        case .payloadLimit where subject == .eventSource:
            return "SSE sends nothing"
        case .payloadLimit where subject.isSignalR:
            return "SignalR servers state no limit; a message over one is the server's close"
        case .longPollSilence where subject != .signalRLongPolling:
            return "only SignalR's long polling has no keep-alive (Engine.IO pings on every transport)"
        case .stall where subject == .signalRLongPolling:
            return "long polling has no keep-alive: the poll's own timeout (100 s) finds it"
        default:
            return nil
        }
    }

    /// Every cell that means something.
    static let all: [FaultCell] = Subject.allCases.flatMap { subject in
        Security.allCases.flatMap { security in
            Route.allCases.flatMap { route in
                Fault.allCases.compactMap { fault in
                    notApplicable(subject, route, fault) == nil ? FaultCell(subject: subject, security: security, route: route, fault: fault) : nil
                }
            }
        }
    }

    /// The cells this run tests: all of them with `REALTIME_FAULT_MATRIX=all`
    /// (`Scripts/fault-matrix.sh`), otherwise `REALTIME_FAULT_CELLS` per fault (2 by default)
    /// drawn with `REALTIME_FAULT_SEED` (a new seed each run when unset), so every fault is
    /// tested on each run and the whole matrix over many. The seed is printed; the same seed
    /// draws the same cells.
    static let selected: [FaultCell] = {
        let environment = ProcessInfo.processInfo.environment
        if environment["REALTIME_FAULT_MATRIX"] == "all" { return all }
        // Some cells, by parts of their descriptions (`REALTIME_FAULT_ONLY="SSE, tls, direct: RST|polling, plain"`).
        if let only = environment["REALTIME_FAULT_ONLY"] {
            let parts = only.split(separator: "|").map(String.init)
            return all.filter { cell in parts.contains { cell.testDescription.contains($0) } }
        }
        let perFault = environment["REALTIME_FAULT_CELLS"].flatMap { Int($0) } ?? 2
        let seed = environment["REALTIME_FAULT_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...999_999)
        print("fault matrix: \(perFault) cells per fault, seed \(seed) (REALTIME_FAULT_SEED=\(seed) draws them again; Scripts/fault-matrix.sh runs all \(all.count))")
        var generator = SplitMix64(seed: seed)
        return Fault.allCases.flatMap { fault in
            var cells = all.filter { $0.fault == fault }
            cells.shuffle(using: &generator)
            return cells.prefix(perFault)
        }
    }()
}

/// A small seeded generator (SplitMix64): the same seed, the same draw, on every platform.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
