import ArgumentParser
import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting
import SignalRHub
import SocketIOEngine
import SpreadbotClient

/// The soak run behind `Scripts/soak.sh`: every protocol at once, each client streaming messages
/// both ways through a `FaultProxy` that applies a seeded random schedule of faults (cuts with FIN
/// and RST, cuts after some bytes, stalls, latency, refused reconnects) in front of the
/// RealtimeTesting server, for `--seconds`. Then the faults stop, the clients catch up, and each
/// delivery promise is checked:
/// - SSE: every event the server published after the first one received arrives once, in order
///   (resumed with Last-Event-ID);
/// - Socket.IO with connection state recovery: every server event once, in order; every emit the
///   client accepted reaches the server at least once, or is named in a `dropped` event;
/// - SignalR with stateful reconnect: every invocation runs exactly once and returns; every streamed
///   item arrives once, in order;
/// - Spreadbot: every acknowledged send that succeeded reaches the server once, in order; every
///   published message arrives once, in order (resumed with `since`).
/// Resident memory and open descriptors are sampled every 10 s and reported. Hidden from --help.
struct SoakCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak", abstract: "Run every client through random faults and check the delivery promises.", shouldDisplay: false)

    @Option(help: "How long the faults go on.") var seconds: Int = 60
    @Option(help: "The seed of the fault schedules (the same seed, the same faults).") var seed: UInt64 = 1
    @Option(help: "Protocols to run, comma-separated.") var protocols: String = "sse,socketio,signalr,spreadbot"
    @Option(help: "The servers: ours (RealtimeTesting, in this process) or real (sse-starlette and aiosignalr, in processes of their own; sse and signalr only).")
    var peers: SoakPeers = .ours
    @Flag(help: "The same traffic without faults (to tell a client's memory growth under faults from its growth under load).")
    var noFaults = false

    func run() async throws {
        let command = self
        // SIGINT and SIGTERM end the command within 1 s, with 130 or 143.
        try await Interruption.run { try await command.work() }
    }

    private func work() async throws {
        let duration = Duration.seconds(seconds)
        let names = protocols.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
        soakSay("soak: \(names.joined(separator: ", ")) for \(seconds) s, seed \(seed)")
        let sampler = ResourceSampler()
        // Samples beside the protocols' runs; cancelled and awaited when they are done.
        let sampling = Task { await sampler.run(every: .seconds(10)) }
        var results: [SoakResult] = []
        try await withThrowingTaskGroup(of: SoakResult.self) { group in
            for (index, name) in names.enumerated() {
                let schedule = Self.schedule(seed: seed &+ UInt64(index), seconds: noFaults ? 0 : seconds)
                group.addTask {
                    switch (name, peers) {
                    case ("sse", _): try await SoakScenarios.sse(duration: duration, schedule: schedule, peers: peers)
                    case ("socketio", .ours): try await SoakScenarios.socketIO(duration: duration, schedule: schedule)
                    case ("signalr", _): try await SoakScenarios.signalR(duration: duration, schedule: schedule, peers: peers)
                    case ("spreadbot", .ours): try await SoakScenarios.spreadbot(duration: duration, schedule: schedule)
                    case ("socketio", .real), ("spreadbot", .real):
                        throw ValidationError("no real peer for \(name): python-socketio has no connection state recovery, Spreadbot no reference server")
                    default: throw ValidationError("unknown protocol \(name) (sse, socketio, signalr, spreadbot)")
                    }
                }
            }
            for try await result in group { results.append(result) }
        }
        sampling.cancel()
        _ = await sampling.value
        let samples = sampler.samples
        for sample in samples { soakSay("  t=\(sample.second) s: rss \(sample.rssKiB) KiB, \(sample.descriptors) descriptors") }
        var failed = false
        for result in results.sorted(by: { $0.name < $1.name }) {
            soakSay("\(result.name): \(result.summary): \(result.problems.isEmpty ? "ok" : "FAILED")")
            for problem in result.problems.prefix(10) { soakSay("  - \(problem)") }
            if !result.problems.isEmpty { failed = true }
        }
        // With our servers the figure is reported, not judged: they run in this process and keep
        // what they published for replays (their histories grow with the run). With the real peers
        // this process holds only the clients: resident memory must be flat after the warm-up (the
        // first 20 % of the run), growing less than 5 % over the rest, and descriptors must not grow.
        // Judged while the faults run: afterwards the checks fetch the servers' records into this
        // process (SignalR's: a dictionary of every invocation that ran, 647,060 in a 30-minute run,
        // about 18 MB), which is the soak's memory, not the clients'.
        let judged = samples.filter { $0.second <= seconds }
        let warm = judged.first { $0.second * 5 >= seconds } ?? judged.first
        if let warm, let last = judged.last, last.second > warm.second {
            let growth = Double(last.rssKiB - warm.rssKiB) / Double(max(warm.rssKiB, 1)) * 100
            let peak = judged.filter { $0.second >= warm.second }.map(\.rssKiB).max() ?? last.rssKiB
            let peakGrowth = Double(peak - warm.rssKiB) / Double(max(warm.rssKiB, 1)) * 100
            let what = peers == .ours ? "clients and servers" : "clients only"
            soakSay(String(format: "memory (%@): rss %d -> %d KiB (%+.1f %%, peak %+.1f %%), descriptors %d -> %d, from t=%d s to t=%d s",
                           what, warm.rssKiB, last.rssKiB, growth, peakGrowth, warm.descriptors, last.descriptors, warm.second, last.second))
            if peers == .real {
                if peakGrowth >= 5 { soakSay("memory: FAILED (grew \(Int(peakGrowth)) % after the warm-up)"); failed = true }
                if last.descriptors > warm.descriptors + 8 { soakSay("descriptors: FAILED (\(warm.descriptors) -> \(last.descriptors))"); failed = true }
            }
        } else if peers == .real {
            soakSay("memory: not judged (a run of at least 30 s samples it)")
        }
        soakSay(failed ? "soak: FAILED" : "soak: every promise held")
        if failed { throw ExitCode(1) }
    }

    static func schedule(seed: UInt64, seconds: Int) -> RandomFaultSchedule {
        RandomFaultSchedule(
            seed: seed, count: seconds * 2, interval: .milliseconds(200) ... .milliseconds(800),
            kinds: [
                .cutFIN, .cutReset, .cutAfterBytes(1_000 ... 50_000),
                .stall(.milliseconds(50) ... .milliseconds(500)),
                .latency(.milliseconds(20), .milliseconds(200) ... .seconds(1)),
                .refuse(.milliseconds(100) ... .milliseconds(800)),
            ])
    }
}

/// Which servers the soak's clients talk to.
enum SoakPeers: String, ExpressibleByArgument, Sendable {
    /// The RealtimeTesting servers, in the soak's process.
    case ours
    /// sse-starlette and aiosignalr (the pinned Python peers of the interop tests), each in a
    /// process of its own, so the soak's memory is the clients' alone.
    case real
}

struct SoakResult: Sendable {
    var name: String
    var summary: String
    var problems: [String]
}

/// Resident memory (/proc/self/statm) and open descriptors (/proc/self/fd), sampled on a timer.
final class ResourceSampler: Sendable {
    struct Sample: Sendable {
        var second: Int
        var rssKiB: Int
        var descriptors: Int
    }
    private let box = NIOLockedValueBox<[Sample]>([])
    var samples: [Sample] { box.withLockedValue { $0 } }

    func run(every interval: Duration) async {
        let start = ContinuousClock.now
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { return }  // the run is over: what the checks afterwards take is not the run's
            let second = Int((ContinuousClock.now - start).components.seconds)
            box.withLockedValue { $0.append(Sample(second: second, rssKiB: Self.rssKiB(), descriptors: Self.descriptors())) }
        }
    }

    static func rssKiB() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        return fields.count > 1 ? (Int(fields[1]) ?? 0) * 4 : 0
    }

    static func descriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }
}

/// Checks a sequence of integers that must arrive once each, in order, with no gap.
struct InOrderCheck {
    private(set) var first: Int?
    private(set) var last: Int?
    private(set) var count = 0
    private(set) var problems: [String] = []

    /// Values skipped at announced gaps (``receive(_:afterAnnouncedGap:)``).
    private(set) var announcedMissing = 0

    /// Receives `value`; when `announced`, a jump forward is counted as announced instead of as a
    /// problem (the values were missed around a reconnect the client reported).
    mutating func receive(_ value: Int, afterAnnouncedGap announced: Bool) {
        if announced, let last, value > last + 1 {
            announcedMissing += value - last - 1
            self.last = value - 1
        }
        receive(value)
    }

    /// Counts the values before `value` as missing without a problem (losses a named server
    /// deviation explains; the caller accounts for them).
    mutating func skip(to value: Int) {
        if let last, value > last + 1 { self.last = value - 1 }
    }

    mutating func receive(_ value: Int) {
        count += 1
        if let last, value != last + 1 {
            if problems.count < 20 { problems.append(value <= last ? "\(value) after \(last): repeated or out of order" : "\(value) after \(last): \(value - last - 1) missing") }
        }
        if first == nil { first = value }
        last = value
    }
}

enum SoakScenarios {
    /// The round's calls did not all return within the limit.
    struct RoundUnanswered: Error {}

    /// `body`'s result, or `RoundUnanswered` (and `body` cancelled) once `limit` has passed.
    static func withinDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw RoundUnanswered() }
            return value
        }
    }

    /// Waits until `done` holds, up to `limit`; returns whether it did.
    static func settle(limit: Duration = .seconds(60), _ done: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if done() { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return done()
    }

    static func sse(duration: Duration, schedule: RandomFaultSchedule, peers: SoakPeers) async throws -> SoakResult {
        switch peers {
        case .ours:
            let server = try await SSETestServer.start(history: 2_000_000, retry: .milliseconds(100))
            let result = try await sse(
                name: "sse", port: server.port, path: "/events", duration: duration, schedule: schedule,
                publish: {
                    _ = server.publish("event")
                    try await Task.sleep(for: .milliseconds(5))
                },
                stopPublishing: { server.nextID - 1 })
            await server.stop()
            return result
        case .real:
            // sse-starlette publishes on its own (200 events a second) from the first request on,
            // keeps the last 100,000 for Last-Event-ID, and says its last id when told to stop.
            let peer = try await PythonPeer.start(scriptPath: peerScript("Tests/EventSourceClientTests/Peers/sse_peer.py"))
            let base = "http://127.0.0.1:\(peer.port)"
            let result = try await sse(
                name: "sse (sse-starlette)", port: peer.port, path: "/soak?rate=200", duration: duration, schedule: schedule,
                publish: { try await Task.sleep(for: .milliseconds(100)) },
                stopPublishing: {
                    let (_, body) = try await HTTPTransport.execute(HTTPRequestSpec(url: base + "/soak/stop"))
                    return Int(String(buffer: body)) ?? -1
                })
            await peer.stop()
            return result
        }
    }

    /// One EventSource through a FaultProxy in front of `port`; `publish` runs in a loop while the
    /// faults go on; `stopPublishing` ends the feed and returns the last id published. Every event
    /// after the first one received must arrive once, in order.
    private static func sse(
        name: String, port: Int, path: String, duration: Duration, schedule: RandomFaultSchedule,
        publish: () async throws -> Void, stopPublishing: () async throws -> Int
    ) async throws -> SoakResult {
        let proxy = try await FaultProxy.start(targetPort: port)
        var configuration = EventSourceConfiguration(
            reconnectionTime: .milliseconds(100), maxReconnectionTime: .milliseconds(500), idleTimeout: .seconds(10),
            connectTimeout: .seconds(5), reachability: AlwaysReachable())
        configuration.clientLabel = "soak"
        let source = EventSource(url: URL(string: proxy.url() + path)!, configuration: configuration)
        let check = NIOLockedValueBox(InOrderCheck())
        // Reads beside the publishing below; cancelled and awaited at the end of the run.
        let reading = Task {
            for try await event in source.events {
                guard let id = Int(event.lastEventId) else { continue }
                check.withLockedValue { $0.receive(id) }
            }
        }
        // The first event opens the check; then the schedule starts.
        try await publish()
        _ = await settle(limit: .seconds(10)) { check.withLockedValue { $0.count } > 0 }
        proxy.startRandomFaults(schedule)
        let end = ContinuousClock.now + duration
        while ContinuousClock.now < end { try await publish() }
        proxy.stopRandomFaults()
        proxy.resume()
        try await proxy.acceptConnections()
        let lastID = try await stopPublishing()
        let caughtUp = await settle { check.withLockedValue { $0.last } == lastID }
        source.close()
        reading.cancel()
        _ = await reading.result
        let faults = proxy.faultLog.count
        let connections = proxy.statistics.connectionsAccepted
        await proxy.stop()
        let result = check.withLockedValue { $0 }
        var problems = result.problems
        if !caughtUp { problems.append("received up to \(result.last.map(String.init) ?? "nothing") of \(lastID)") }
        return SoakResult(
            name: name,
            summary: "\(lastID) events published, \(result.count) received, \(faults) faults, \(connections) connections",
            problems: problems)
    }

    /// A peer script's path: relative to the package's root (Scripts/soak.sh runs from there).
    static func peerScript(_ path: String) -> String {
        URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(path).path
    }

    static func socketIO(duration: Duration, schedule: RandomFaultSchedule) async throws -> SoakResult {
        var options = SocketIOTestServer.Options()
        options.connectionStateRecovery = true
        let server = try await SocketIOTestServer.start(options: options)
        let proxy = try await FaultProxy.start(targetPort: server.port)
        var configuration = SocketIOConfiguration()
        configuration.reconnectionDelay = .milliseconds(100)
        configuration.reconnectionDelayMax = .milliseconds(500)
        configuration.clientLabel = "soak"
        configuration.reachability = AlwaysReachable()
        let manager = SocketManager(url: proxy.url(), configuration: configuration)
        let socket = manager.defaultSocket
        // Recovery is the server's to grant: a reconnect it did not recover (`socket.recovered` false,
        // e.g. the server had not yet noticed the old connection's end) is announced, and the
        // events broadcast meanwhile are not replayed. Gaps after such a reconnect are counted as
        // announced; any other gap is a broken promise.
        struct NewsState {
            var check = InOrderCheck()
            var unrecoveredSinceLastEvent = false
            var unrecoveredReconnects = 0
        }
        let news = NIOLockedValueBox(NewsState())
        let dropped = NIOLockedValueBox<Set<Int>>([])
        socket.on(clientEvent: .connect) { _ in
            let recovered = socket.recovered
            news.withLockedValue { state in
                if !recovered {
                    state.unrecoveredSinceLastEvent = true
                    state.unrecoveredReconnects += 1
                }
            }
        }
        socket.on("news") { event in
            guard let value = event.arguments.first?.intValue else { return }
            news.withLockedValue { state in
                state.check.receive(value, afterAnnouncedGap: state.unrecoveredSinceLastEvent)
                state.unrecoveredSinceLastEvent = false
            }
        }
        socket.on(clientEvent: .dropped) { event in
            for entry in event.arguments {
                if let value = entry["data"]?.arrayValue?.first?.intValue { _ = dropped.withLockedValue { $0.insert(value) } }
            }
        }
        try await socket.connect(timeout: .seconds(10))
        proxy.startRandomFaults(schedule)
        var broadcasts = 0
        var accepted: [Int] = []
        var refused = 0
        let end = ContinuousClock.now + duration
        var next = 0
        while ContinuousClock.now < end {
            server.broadcast("news", [.number(Double(broadcasts))])
            broadcasts += 1
            do {
                try socket.emit("record", arguments: [.number(Double(next))])
                accepted.append(next)
            } catch {
                refused += 1
            }
            next += 1
            try await Task.sleep(for: .milliseconds(5))
        }
        proxy.stopRandomFaults()
        proxy.resume()
        try await proxy.acceptConnections()
        func arrived() -> Set<Int> { Set(server.recorded.compactMap { $0.first?.intValue }) }
        let caughtUp = await settle {
            let seen = arrived()
            let droppedNow = dropped.withLockedValue { $0 }
            let (last, announced) = news.withLockedValue { ($0.check.last, $0.unrecoveredSinceLastEvent) }
            return (last == broadcasts - 1 || announced)
                && accepted.allSatisfy { seen.contains($0) || droppedNow.contains($0) }
        }
        let seen = arrived()
        let droppedNow = dropped.withLockedValue { $0 }
        let lost = accepted.filter { !seen.contains($0) && !droppedNow.contains($0) }
        let faults = proxy.faultLog.count
        let connections = proxy.statistics.connectionsAccepted
        manager.disconnect()
        await proxy.stop()
        await server.stop()
        let final = news.withLockedValue { $0 }
        let check = final.check
        var problems = check.problems
        if check.first != 0 { problems.append("the first server event received was \(check.first.map(String.init) ?? "none"), not 0") }
        var announcedGaps = final.check.announcedMissing
        if check.last != broadcasts - 1 {
            if final.unrecoveredSinceLastEvent {
                announcedGaps += broadcasts - 1 - (check.last ?? -1)
            } else if !caughtUp {
                problems.append("server events received up to \(check.last.map(String.init) ?? "none") of \(broadcasts - 1)")
            }
        }
        if !lost.isEmpty { problems.append("\(lost.count) accepted emits neither arrived nor were reported dropped, first \(lost.prefix(5))") }
        return SoakResult(
            name: "socketio",
            summary: "\(broadcasts) server events, \(check.count) received, \(announcedGaps) missed after \(final.unrecoveredReconnects) "
                + "reconnects the server did not recover; \(accepted.count) emits accepted, \(refused) refused, "
                + "\(seen.count) arrived, \(droppedNow.count) reported dropped; \(faults) faults, \(connections) connections",
            problems: problems)
    }

    /// The hub the SignalR soak talks to: `record(x)` runs once per call and returns x;
    /// `burstFrom(start, n)` sends the caller the `item` invocations start..<start+n.
    struct SignalRBackend {
        var name: String
        var port: Int
        /// How many messages the server wrote twice, asked at the end; nil for a server that never
        /// does (ours: then every repeat or gap is a problem). aiosignalr 0.1.1 writes a message
        /// again after a replay already carried it when its sender was still waiting to write at
        /// the cut (a named deviation, see StatefulReconnectTests; the peer script counts these
        /// without changing them). Messages are numbered by position, so each copy is one more
        /// message to the client: an item copy arrives as a repeat, and the client's count runs one
        /// ahead of the server's, so at the next replay the first message it had not received is
        /// taken for one already seen and dropped (an item missing, or a call's reply). Its replay
        /// can also leave a message unwritten (the peer script's `dropped()`): the client's count
        /// then runs behind, a message it has processed comes again at the next replay, and the
        /// unwritten one may come late or never. Repeats, losses and late arrivals are counted and
        /// must each stay within what the server's counts explain.
        var serverCopies: ((HubConnection) async throws -> (copies: Int, dropped: Int))?
        /// How many times each recorded value ran, asked over a healthy connection at the end.
        var recordedCounts: (HubConnection) async throws -> [Int: Int]
        /// Items the server sent (nil: every burst's items).
        var streamedTotal: () -> Int?
        var stop: () async -> Void
    }

    static func signalR(duration: Duration, schedule: RandomFaultSchedule, peers: SoakPeers) async throws -> SoakResult {
        switch peers {
        case .ours:
            var options = SignalRTestServer.Options()
            options.statefulReconnect = true
            options.statefulReconnectTimeout = .seconds(30)
            let server = try await SignalRTestServer.start(options: options)
            let recorded = NIOLockedValueBox<[Int: Int]>([:])
            server.method("record") { call in
                let value = call.arguments[0].intValue ?? -1
                recorded.withLockedValue { $0[value, default: 0] += 1 }
                return call.arguments[0]
            }
            let streamed = NIOLockedValueBox(0)
            server.method("burstFrom", concurrent: true) { [weak server] call in
                let start = call.arguments[0].intValue ?? 0
                for value in start..<(start + (call.arguments[1].intValue ?? 0)) {
                    try await server?.invokeClientSend(call.connectionId, "item", [.number(Double(value))])
                    streamed.withLockedValue { $0 = max($0, value + 1) }
                }
                return nil
            }
            return try await signalR(
                duration: duration, schedule: schedule,
                backend: SignalRBackend(
                    name: "signalr", port: server.port, serverCopies: nil,
                    recordedCounts: { _ in recorded.withLockedValue { $0 } }, streamedTotal: { streamed.withLockedValue { $0 } },
                    stop: { await server.stop() }))
        case .real:
            let peer = try await PythonPeer.start(scriptPath: peerScript("Tests/SignalRHubTests/Peers/aiosignalr_server.py"), arguments: ["stateful"])
            return try await signalR(
                duration: duration, schedule: schedule,
                backend: SignalRBackend(
                    name: "signalr (aiosignalr)", port: peer.port,
                    serverCopies: { connection in
                        (try await connection.invoke(method: "copies"), try await connection.invoke(method: "dropped"))
                    },
                    recordedCounts: { connection in
                        var counts: [Int: Int] = [:]
                        var start = 0
                        while true {
                            let page: [Int] = try await connection.invoke(method: "recordedPage", arguments: start, 10_000)
                            for value in page { counts[value, default: 0] += 1 }
                            if page.count < 10_000 { return counts }
                            start += page.count
                        }
                    },
                    streamedTotal: { nil }, stop: { await peer.stop() }))
        }
    }

    private static func signalR(duration: Duration, schedule: RandomFaultSchedule, backend: SignalRBackend) async throws -> SoakResult {
        let proxy = try await FaultProxy.start(targetPort: backend.port)
        // A stateful reconnect tries a few times within seconds, then the connection ends and says
        // so (onClosed, and every pending call fails with the error). The soak then counts that end,
        // opens a new connection and goes on: what was in flight on the ended connection may or may
        // not have run (its calls failed), so those invocations must not run twice but may be
        // missing, and streamed items sent into the ended connection may be missing (announced).
        struct Items {
            var check = InOrderCheck()
            var endedSinceLastItem = false
            /// With a server that writes copies (`SignalRBackend.serverCopies`): items that came
            /// again, items skipped, and skipped items that came later after all (a reorder: a problem).
            var repeats = 0
            var skipped = 0
            var skippedValues = Set<Int>()
            var lateArrivals = 0
        }
        let burstSize = 50
        let countsCopies = backend.serverCopies != nil
        let items = NIOLockedValueBox(Items())
        func connect() async throws -> (HubConnection, NIOLockedValueBox<String?>) {
            let connection = HubConnectionBuilder().withUrl(url: proxy.url() + "/hub", transport: .webSockets)
                .withOptions {
                    $0.statefulReconnect = true
                    $0.clientLabel = "soak"
                }.build()
            connection.on("item") { (value: Int) in
                items.withLockedValue { state in
                    if countsCopies, !state.endedSinceLastItem, let last = state.check.last, value != last + 1 {
                        if value <= last {
                            if state.skippedValues.contains(value) { state.lateArrivals += 1 } else { state.repeats += 1 }
                            return
                        }
                        state.skipped += value - last - 1
                        if state.skippedValues.count < 100_000 { state.skippedValues.formUnion(last + 1..<value) }
                        state.check.skip(to: value)
                    }
                    state.check.receive(value, afterAnnouncedGap: state.endedSinceLastItem)
                    state.endedSinceLastItem = false
                }
            }
            let closed = NIOLockedValueBox<String?>(nil)
            connection.onClosed { error in
                closed.withLockedValue { $0 = "\(String(describing: error))" }
                items.withLockedValue { $0.endedSinceLastItem = true }
            }
            // A start can meet a fault too: try again (it fails whole, nothing half-done).
            var attempts = 0
            while true {
                do {
                    try await connection.start()
                    return (connection, closed)
                } catch {
                    attempts += 1
                    if attempts >= 20 { throw error }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
        }
        var (connection, closed) = try await connect()
        proxy.startRandomFaults(schedule)
        var problems: [String] = []
        var invoked = 0
        var uncertain = Set<Int>()
        var ended: [String] = []
        var resumes = 0
        var bursts = 0
        /// Rounds whose replies did not all come on a live connection (see `SignalRBackend.serverCopies`).
        var unansweredRounds = 0
        let end = ContinuousClock.now + duration
        while ContinuousClock.now < end {
            let base = invoked
            invoked += 20
            let current = connection
            let burstStart = bursts * burstSize
            let burstInvoked = NIOLockedValueBox(false)
            defer { if burstInvoked.withLockedValue({ $0 }) { bursts += 1 } }
            do {
                // Bounded: a reply lost on a live connection must not hang the run (a server's
                // stall ends the connection within its 30 s timeout; two minutes is ample).
                let values = try await withinDeadline(.seconds(120)) {
                    let values = try await withThrowingTaskGroup(of: Int.self) { group in
                        for index in base..<(base + 20) { group.addTask { try await current.invoke(method: "record", arguments: index) } }
                        var all: [Int] = []
                        for try await value in group { all.append(value) }
                        return all
                    }
                    // The bursts' items form one sequence; a burst cut short by an ended
                    // connection leaves a gap that the end announced.
                    burstInvoked.withLockedValue { $0 = true }
                    try await current.invoke(method: "burstFrom", arguments: burstStart, burstSize)
                    return values
                }
                if values.sorted() != Array(base..<(base + 20)) { problems.append("invocations \(base)..<\(base + 20) returned \(values.sorted())") }
            } catch {
                // Only an ended connection may fail a call; anything else is a broken promise.
                _ = await settle(limit: .seconds(10)) { closed.withLockedValue { $0 } != nil }
                if let reason = closed.withLockedValue({ $0 }) {
                    ended.append(reason)
                } else if error is RoundUnanswered, backend.serverCopies != nil {
                    unansweredRounds += 1
                } else {
                    problems.append("a call failed on a live connection: \(error)")
                    break
                }
                uncertain.formUnion(base..<(base + 20))
                resumes += connection.statefulReconnectCount
                await connection.stop()
                (connection, closed) = try await connect()
            }
        }
        proxy.stopRandomFaults()
        proxy.resume()
        try await proxy.acceptConnections()
        let total = backend.streamedTotal() ?? bursts * burstSize
        let caughtUp = await settle {
            let state = items.withLockedValue { $0 }
            return state.check.last == total - 1 || state.endedSinceLastItem
        }
        let counts = try await backend.recordedCounts(connection)
        let serverCounts = try await backend.serverCopies?(connection)
        let twice = counts.filter { $0.value > 1 }.map(\.key).sorted()
        let missing = (0..<invoked).filter { counts[$0] == nil && !uncertain.contains($0) }
        if !twice.isEmpty { problems.append("\(twice.count) invocations ran more than once, first \(twice.prefix(5))") }
        if !missing.isEmpty { problems.append("\(missing.count) invocations never ran, first \(missing.prefix(5))") }
        let final = items.withLockedValue { $0 }
        problems += final.check.problems
        if !caughtUp { problems.append("streamed items received up to \(final.check.last.map(String.init) ?? "none") of \(total - 1)") }
        let faults = proxy.faultLog.count
        let connections = proxy.statistics.connectionsAccepted
        resumes += connection.statefulReconnectCount
        await connection.stop()
        await proxy.stop()
        await backend.stop()
        let check = final.check
        let endedSummary = ended.isEmpty ? "" : "; \(ended.count) connections ended after their stateful reconnect gave up (reported), "
            + "\(uncertain.count) invocations in flight then, \(final.check.announcedMissing) items missed with them"
        var repeatSummary = ""
        if let (copies, dropped) = serverCounts {
            repeatSummary = "; the server wrote \(copies) messages twice and left \(dropped) unwritten: \(final.repeats) items arrived again, "
                + "\(final.skipped) items and \(unansweredRounds) rounds' replies were lost, \(final.lateArrivals) items came late"
            let explained = copies + dropped
            if final.repeats > explained { problems.append("\(final.repeats) items arrived again, more than the server's counts explain (\(explained))") }
            if final.skipped + unansweredRounds > explained {
                problems.append("\(final.skipped) items and \(unansweredRounds) replies lost, more than the server's counts explain (\(explained))")
            }
            if final.lateArrivals > dropped { problems.append("\(final.lateArrivals) items arrived after later ones, more than the server left unwritten (\(dropped))") }
        }
        return SoakResult(
            name: backend.name,
            summary: "\(invoked) invocations, \(total) items streamed, \(check.count) received; \(faults) faults, "
                + "\(connections) connections, \(resumes) stateful reconnects" + endedSummary + repeatSummary,
            problems: problems)
    }

    static func spreadbot(duration: Duration, schedule: RandomFaultSchedule) async throws -> SoakResult {
        let server = try await SpreadbotTestServer.start()
        let proxy = try await FaultProxy.start(targetPort: server.port)
        var configuration = SpreadbotConfiguration(
            baseURL: proxy.url(), authURL: server.authURL, accessToken: server.options.accessToken,
            refreshToken: server.options.refreshToken, base64Credentials: server.options.base64Credentials)
        configuration.reachability = AlwaysReachable()
        configuration.acknowledgedSends = true
        configuration.transports = [.webSocket]
        configuration.maxReconnectAttempts = 1_000
        configuration.reconnectDelay = .milliseconds(50)
        configuration.maxReconnectDelay = .milliseconds(500)
        configuration.retryDelay = .milliseconds(50)
        configuration.clientLabel = "soak"
        let client = Spreadbot(configuration: configuration)
        let messages = NIOLockedValueBox(InOrderCheck())
        client.onMessage { _, _, data in
            if let text = data.string, text.hasPrefix("p"), let value = Int(text.dropFirst()) { messages.withLockedValue { $0.receive(value) } }
        }
        client.establishConnection(path: "soak")
        _ = await settle(limit: .seconds(10)) { client.state == .connected }
        proxy.startRandomFaults(schedule)
        // Publishes beside the checks below, which await its result.
        let publishing = Task {
            var index = 0
            let end = ContinuousClock.now + duration
            while ContinuousClock.now < end {
                _ = server.publish("p\(index)", to: "soak")
                index += 1
                try await Task.sleep(for: .milliseconds(5))
            }
            return index
        }
        var delivered: [Int] = []
        var failed = 0
        var index = 0
        let end = ContinuousClock.now + duration
        while ContinuousClock.now < end {
            do {
                try await client.send("s\(index)")
                delivered.append(index)
            } catch {
                failed += 1
            }
            index += 1
        }
        let published = try await publishing.value
        proxy.stopRandomFaults()
        proxy.resume()
        try await proxy.acceptConnections()
        let caughtUp = await settle { messages.withLockedValue { $0.last } == published - 1 }
        var problems: [String] = []
        let received = server.received(on: "soak").compactMap { entry -> Int? in
            guard case .text(let text) = entry, text.hasPrefix("s") else { return nil }
            return Int(text.dropFirst())
        }
        var previous = -1
        for value in received {
            if value <= previous, problems.count < 10 { problems.append("send \(value) arrived after \(previous): repeated or out of order") }
            previous = value
        }
        let arrived = Set(received)
        let lost = delivered.filter { !arrived.contains($0) }
        if !lost.isEmpty { problems.append("\(lost.count) confirmed sends never arrived, first \(lost.prefix(5))") }
        let check = messages.withLockedValue { $0 }
        problems += check.problems
        if check.first != 0 { problems.append("the first published message received was \(check.first.map(String.init) ?? "none"), not 0") }
        if !caughtUp { problems.append("published messages received up to \(check.last.map(String.init) ?? "none") of \(published - 1)") }
        let faults = proxy.faultLog.count
        let connections = proxy.statistics.connectionsAccepted
        client.closeConnection()
        await proxy.stop()
        await server.stop()
        return SoakResult(
            name: "spreadbot",
            summary: "\(index) sends, \(delivered.count) confirmed, \(failed) failed, \(received.count) arrived; \(published) published, "
                + "\(check.count) received; \(faults) faults, \(connections) connections",
            problems: problems)
    }
}

private func soakSay(_ line: String) {
    StandardOutput.write(line + "\n", to: STDOUT_FILENO)
}
