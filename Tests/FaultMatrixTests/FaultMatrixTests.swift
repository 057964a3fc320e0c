import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOSSL
import RealtimeCore
import RealtimeTesting
import Testing

/// The fault matrix: every protocol and transport, plain and TLS, direct and through real proxies
/// (tinyproxy, dante), under the faults a network and a server make. Each cell is a test of its
/// own: the client connects through the fault point (a `FaultProxy`, or a `TCPRelay` process for
/// a killed relay) in front of the server, a message goes both ways, the fault comes, three
/// messages are sent while it lasts, and the cell asserts that
/// - the client reconnects within its policy and never gives up,
/// - the first thing it reports is a lost connection (`connectionClosed`, `webSocketClosed` or a
///   keep-alive's `timeout` at stage `established`; for Socket.IO the JavaScript client's
///   `transport close`, `transport error` or `ping timeout`), never a handshake or TLS failure,
/// - each message sent during the fault is delivered (the other side has it) or reported, one by
///   one, and none waits forever,
/// - a message goes both ways again afterwards.
///
/// CI runs two cells per fault, drawn with a seed it prints; `Scripts/fault-matrix.sh` runs all.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FaultMatrixTests {
    @Test(arguments: FaultCell.selected)
    func cell(_ cell: FaultCell) async throws {
        let rig = try await FaultRig.start(cell)
        do {
            try await rig.run()
        } catch {
            Issue.record("\(cell.testDescription): \(error)")
        }
        await rig.stop()
        rig.record()
    }
}

/// A cell's server, fault point, proxy and client, and what it saw.
final class FaultRig: Sendable {
    let cell: FaultCell
    let subject: any FaultSubject
    let certificates: TestCertificates?
    let front: FaultProxy?
    let relay: TCPRelay?
    let proxy: NIOLockedValueBox<ProxyProcess?>
    let outcome = NIOLockedValueBox<[String]>([])
    let started = ContinuousClock.now

    private init(cell: FaultCell, subject: any FaultSubject, certificates: TestCertificates?, front: FaultProxy?, relay: TCPRelay?, proxy: ProxyProcess?) {
        self.cell = cell
        self.subject = subject
        self.certificates = certificates
        self.front = front
        self.relay = relay
        self.proxy = NIOLockedValueBox(proxy)
    }

    static func subject(for cell: FaultCell) -> any FaultSubject {
        if cell.subject.isSocketIO { return SocketIOSubject(cell) }
        if cell.subject.isSignalR { return SignalRSubject(cell) }
        if cell.subject.isSpreadbot { return SpreadbotSubject(cell) }
        return EventSourceSubject(cell)
    }

    var proxyKind: ProxyProcess.Kind? {
        switch cell.route {
        case .direct: nil
        case .httpProxy: .tinyproxy()
        case .socks5: .dante
        }
    }

    static func start(_ cell: FaultCell) async throws -> FaultRig {
        let certificates = cell.security == .tls ? try await TestCertificates.make() : nil
        let subject = subject(for: cell)
        let serverPort = try await subject.startServer(tls: try certificates?.server.serverConfiguration())
        let relay = cell.fault == .relayKilled ? try await TCPRelay.start(to: serverPort) : nil
        let front = relay == nil ? try await FaultProxy.start(targetPort: serverPort) : nil
        let rig = FaultRig(cell: cell, subject: subject, certificates: certificates, front: front, relay: relay, proxy: nil)
        if let kind = rig.proxyKind { try await rig.startProxy(kind, port: 0) }
        return rig
    }

    private func startProxy(_ kind: ProxyProcess.Kind, port: Int) async throws {
        let started = try await ProxyProcess.start(kind, port: port)
        proxy.withLockedValue { $0 = started }
    }

    var frontPort: Int { relay?.port ?? front?.port ?? 0 }

    func note(_ line: String) { outcome.withLockedValue { $0.append(line) } }

    func run() async throws {
        var runtime = RealtimeRuntime()
        if ProcessInfo.processInfo.environment["REALTIME_FAULT_LOG"] != nil {
            // The clients' own log on standard error, for a cell under study.
            var logger = Logger(label: "fault-cell", factory: { StreamLogHandler.standardError(label: $0) })
            logger.logLevel = .trace
            runtime = RealtimeRuntime(logger: logger)
        }
        runtime.proxy = proxy.withLockedValue { $0 }?.configuration ?? .none
        let base = "\(cell.security == .tls ? "https" : "http")://127.0.0.1:\(frontPort)"
        let tls = certificates.map { TLSOptions(trustRoots: .pemFile($0.ca.certificatePath)) } ?? .default
        try await subject.connect(base: base, tls: tls, runtime: runtime)
        try await subject.exchange("before")
        if let kind = proxyKind, let proxy = proxy.withLockedValue({ $0 }) {
            #expect(proxy.sawTarget(port: frontPort) || kind == .dante, "the client went through \(kind): \(proxy.log.suffix(500))")
        }
        switch cell.fault {
        case .payloadLimit: try await payloadLimit()
        case .longPollSilence: try await longPollSilence()
        default: try await outage()
        }
    }

    /// The fault, three messages during it, the reconnect, and what was reported.
    private func outage() async throws {
        let faultAt = ContinuousClock.now
        try await inject()
        let subject = subject
        let tracked = (1...3).map { index in Task { await Self.bounded { await subject.sendDuringOutage("during \(index)") } } }
        var delivered = 0
        var reported: [String] = []
        for task in tracked {
            if let failure = await task.value { reported.append(failure) } else { delivered += 1 }
        }
        // A polling transport whose requests each have a connection of their own (through an HTTP
        // proxy) may have had none open through the fault point when it struck: the session then
        // outlives it, and every message must still be delivered.
        let polling = [.socketIOPolling, .signalRLongPolling].contains(cell.subject)
        if polling && subject.losses.isEmpty && subject.opens == 1 && delivered == 3 {
            try await subject.exchange("after")
            note("the session outlived the fault (no request of it was cut); during: 3 delivered")
            return
        }
        let reconnected = (try? await waitUntil("the client reconnects", limit: .seconds(60)) { subject.opens >= 2 }) != nil
        let took = ContinuousClock.now - faultAt
        #expect(reconnected, "no reconnect within 60 s; losses \(subject.losses)")
        #expect(!subject.gaveUp, "the client gave up; losses \(subject.losses)")
        let first = subject.losses.first
        #expect(first.map { subject.isLostConnection($0, silent: cell.fault == .stall, polling: polling) } == true, "first report: \(String(describing: first?.text))")
        // Attempts while the server is away may end in the TLS handshake (a relay or proxy accepts,
        // then finds no server): `connectionClosed` at stage `tls`, retried. Never a TLS failure.
        #expect(!subject.losses.contains { $0.code == "tlsFailure" }, "\(subject.losses.map(\.text))")
        try await subject.exchange("after")
        note("reconnected after \(Self.seconds(took)); first report \(first.map { "\($0)" } ?? "none"); during: \(delivered) delivered, \(reported.count) reported")
        if !reported.isEmpty { note("reported: \(reported.map { String($0.prefix(160)) })") }
    }

    private func inject() async throws {
        switch cell.fault {
        case .reset: front?.cutAll(.reset)
        case .fin: front?.cutAll(.fin)
        case .relayKilled:
            guard let relay else { return }
            await relay.kill()
            // The relay stays down for a second, as a box that restarts; nothing to await but time.
            try await Task.sleep(for: .seconds(1))
            try await relay.restart()
        case .stall:
            guard let front else { return }
            front.inject(.stall(.both, for: nil))
            // The client finds the silence by its own keep-alive; then the dead flow is reset (as
            // the NAT or the peer does at last) and new connections pass.
            try? await waitUntil("the client finds the silence", limit: .seconds(30)) { !subject.losses.isEmpty }
            front.cutAll(.reset)
            front.resume()
        case .proxyRestart:
            guard let old = proxy.withLockedValue({ $0 }), let kind = proxyKind else { return }
            await old.stop()
            try await startProxy(kind, port: old.port)
        case .serverRestart:
            await subject.stopServer()
            let port = try await subject.startServer(tls: try certificates?.server.serverConfiguration())
            front?.retarget(port: port)
            front?.cutAll(.fin)
        case .payloadLimit, .longPollSilence:
            break
        }
    }

    /// A message over the server's limit fails (locally where the protocol says the limit) and
    /// the messages after it go.
    private func payloadLimit() async throws {
        let error = await subject.sendOversized()
        if cell.subject.isSocketIO {
            #expect(error?.code == .messageTooLarge, "\(String(describing: error))")
            #expect(subject.opens == 1, "the session lives on")
        } else {
            #expect(error?.code == .badStatus && error?.detail.contains("dropped") == true, "\(String(describing: error))")
        }
        try await subject.exchange("after")
        note("oversized: \(error.map { "\($0.code)" } ?? "delivered"); \(subject.opens) connection(s); after: delivered")
    }

    /// A long poll held past the client's server timeout, with nothing in it: still connected.
    private func longPollSilence() async throws {
        // Idle for longer than the server timeout (4 s) and two 10 s polls; nothing to await.
        try await Task.sleep(for: .seconds(12))
        #expect(subject.losses.isEmpty, "\(subject.losses)")
        #expect(subject.opens == 1)
        try await subject.exchange("after the silence")
        note("idle 12 s: \(subject.losses.count) losses, still connected")
    }

    func stop() async {
        await subject.stopClient()
        await subject.stopServer()
        await front?.stop()
        await relay?.stop()
        await proxy.withLockedValue { $0 }?.stop()
        certificates?.remove()
    }

    /// What `send` reports, or that it reported nothing within 60 s (a message neither delivered
    /// nor reported: the cell fails on it, and goes on).
    static func bounded(_ send: @escaping @Sendable () async -> String?) async -> String? {
        await withTaskGroup(of: String??.self) { group in
            group.addTask { .some(await send()) }
            group.addTask {
                // The limit itself: nothing to await but the time.
                try? await Task.sleep(for: .seconds(60))
                return .none
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? "neither delivered nor reported within 60 s"
        }
    }

    static func seconds(_ duration: Duration) -> String {
        let components = duration.components
        return String(format: "%.1f s", Double(components.seconds) + Double(components.attoseconds) / 1e18)
    }

    /// Appends the cell's line to `$REALTIME_FAULT_RESULTS` (Scripts/fault-matrix.sh makes the
    /// table of Docs/Reliability.md from it) and prints it.
    func record() {
        let line = "\(cell.testDescription) | \(outcome.withLockedValue { $0.joined(separator: "; ") })"
        print("fault cell: \(line)")
        guard let path = ProcessInfo.processInfo.environment["REALTIME_FAULT_RESULTS"] else { return }
        Self.results.withLockedValue { _ in
            if let handle = FileHandle(forWritingAtPath: path) ?? (FileManager.default.createFile(atPath: path, contents: nil) ? FileHandle(forWritingAtPath: path) : nil) {
                handle.seekToEndOfFile()
                handle.write(Data((line + "\n").utf8))
                try? handle.close()
            }
        }
    }

    private static let results = NIOLockedValueBox(())
}
