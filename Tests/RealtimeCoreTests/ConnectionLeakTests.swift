import Foundation
import NIOCore
import NIOSSL
import RealtimeCore
import RealtimeTesting
import Testing

/// Every failure path of the WebSocket handshake closes its socket: 1,000 failed attempts in a row
/// leave no connection open. Checked two ways: the process's open descriptors (`/proc/self/fd`,
/// with room for what other suites running at the same time open), and, exactly, the client
/// sockets to the test server's port still open in the kernel's table (`/proc/net/tcp`).
@Suite(.serialized, .timeLimit(.minutes(3))) struct ConnectionLeakTests {
    static let attempts = 1000

    /// Runs `attempt` `attempts` times, 50 at a time, each expected to fail with `code`.
    func failRepeatedly(code: RealtimeError.Code, _ attempt: @escaping @Sendable (Int) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: RealtimeError.Code?.self) { group in
            var started = 0
            var codes: [RealtimeError.Code?] = []
            while started < Self.attempts || !group.isEmpty {
                while started < Self.attempts, started - codes.count < 50 {
                    let index = started
                    group.addTask {
                        do {
                            try await attempt(index)
                            return nil
                        } catch let error as RealtimeError {
                            return error.code
                        }
                    }
                    started += 1
                }
                if let code = try await group.next() { codes.append(code) }
            }
            #expect(codes.count == Self.attempts)
            #expect(codes.allSatisfy { $0 == code }, "\(Set(codes.map { String(describing: $0) }))")
        }
    }

    func expectNoLeak(port: Int, descriptorsBefore: Int) async throws {
        // Abandoned attempts finish closing in the background (a cancelled connect closes its
        // channel once the connect completes): give them up to 3 s to settle.
        var open = Self.openClientSockets(toPort: port)
        var after = Self.openDescriptors()
        // Sampled: the count of open sockets is read from /proc, which has nothing to await.
        for _ in 0..<60 where open > 0 || after - descriptorsBefore >= 64 {
            try await Task.sleep(for: .milliseconds(50))
            open = Self.openClientSockets(toPort: port)
            after = Self.openDescriptors()
        }
        #expect(open == 0, "\(open) client sockets to port \(port) are still open")
        #expect(after - descriptorsBefore < 64, "descriptors went from \(descriptorsBefore) to \(after)")
    }

    @Test func refusedUpgradesLeaveNoSocketOpen() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/bad") { _ in .text("no upgrade here", status: 400) }
        server.route("/missing") { _ in .text("unknown connection id", status: 404) }
        let before = Self.openDescriptors()
        try await failRepeatedly(code: .badStatus) { index in
            // 30 s: on two busy cores a refused attempt among 50 at once has taken over the default 10 s.
            try await WebSocketTransport.connect(
                to: server.webSocketBaseURL + (index.isMultiple(of: 2) ? "/bad" : "/missing"), configuration: WebSocketConfiguration(connectTimeout: .seconds(30))
            ) { _ in }
        }
        try await expectNoLeak(port: server.port, descriptorsBefore: before)
    }

    @Test func tlsFailuresLeaveNoSocketOpen() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.selfSigned.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.selfSigned.keyPath, format: .pem)))
        let server = try await WebSocketEchoServer.start(tls: tls)
        defer { Task { await server.stop() } }
        let before = Self.openDescriptors()
        // A minute to connect: 50 handshakes at a time beside the whole suite and two CPU-burning
        // loops once took longer than the default 10 s, and a timeout is not the path under test.
        try await failRepeatedly(code: .tlsFailure) { _ in
            try await WebSocketTransport.connect(
                to: server.webSocketBaseURL, configuration: WebSocketConfiguration(connectTimeout: .seconds(60))
            ) { _ in }
        }
        try await expectNoLeak(port: server.port, descriptorsBefore: before)
    }

    @Test func connectTimeoutsLeaveNoSocketOpen() async throws {
        let silent = try await SilentTCPServer.start()
        defer { Task { await silent.stop() } }
        let before = Self.openDescriptors()
        try await failRepeatedly(code: .timeout) { _ in
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(silent.port)/", configuration: WebSocketConfiguration(connectTimeout: .milliseconds(100))
            ) { _ in }
        }
        try await expectNoLeak(port: silent.port, descriptorsBefore: before)
    }

    /// A server that refuses the upgrade and then stalls in the middle of its body: the attempt ends
    /// with the connect deadline and closes its socket.
    @Test func aRefusalWhoseBodyStallsTimesOutAndLeavesNoSocket() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/stall") { _ in
            let feed = ChunkFeed()
            feed.send("the start of a refusal, then nothing")
            return ScriptedResponse(status: 403, headers: [("Content-Type", "text/plain")], body: .feed(feed))
        }
        let before = Self.openDescriptors()
        let codes = try await withThrowingTaskGroup(of: RealtimeError.Code?.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    do {
                        try await WebSocketTransport.connect(
                            to: server.webSocketBaseURL + "/stall", configuration: WebSocketConfiguration(connectTimeout: .milliseconds(300))
                        ) { _ in }
                        return nil
                    } catch let error as RealtimeError {
                        return error.code
                    }
                }
            }
            return try await group.reduce(into: [RealtimeError.Code?]()) { $0.append($1) }
        }
        #expect(codes.count == 50)
        #expect(codes.allSatisfy { $0 == .timeout }, "\(Set(codes.map { String(describing: $0) }))")
        try await expectNoLeak(port: server.port, descriptorsBefore: before)
    }

    /// A caller that gives up (its task is cancelled) while the upgrade is pending gets
    /// `CancellationError` and leaves nothing open.
    @Test func cancelledConnectsLeaveNoSocketOpen() async throws {
        let silent = try await SilentTCPServer.start()
        defer { Task { await silent.stop() } }
        let before = Self.openDescriptors()
        let outcomes = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    let attempt = Task {
                        try await WebSocketTransport.connect(
                            to: "ws://127.0.0.1:\(silent.port)/", configuration: WebSocketConfiguration(connectTimeout: .seconds(30))
                        ) { _ in }
                    }
                    // The cancel must land while the connect is in progress: a delay is what is varied.
                    try await Task.sleep(for: .milliseconds(20))
                    attempt.cancel()
                    switch await attempt.result {
                    case .success: return "opened"
                    case .failure(let error): return error is CancellationError ? "cancelled" : "\(error)"
                    }
                }
            }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(outcomes.count == 200)
        #expect(outcomes.allSatisfy { $0 == "cancelled" }, "\(Set(outcomes))")
        try await expectNoLeak(port: silent.port, descriptorsBefore: before)
    }

    static func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }

    /// Client sockets whose remote port is `port` and that still hold a descriptor (connecting,
    /// established, or closed by the peer but not by us). TIME_WAIT and FIN_WAIT entries have none.
    static func openClientSockets(toPort port: Int) -> Int {
        var count = 0
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 3, let remotePort = fields[2].split(separator: ":").last.flatMap({ Int($0, radix: 16) })
                else { continue }
                let state = fields[3]
                if remotePort == port, state == "01" || state == "02" || state == "08" { count += 1 }
            }
        }
        return count
    }
}
