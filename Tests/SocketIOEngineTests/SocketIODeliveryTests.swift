import Foundation
import Logging
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// The delivery promises of Sources/SocketIOEngine/SocketIOEngine.docc/SocketIOGuide.md ("Delivery"), proven against python-socketio through a
/// `FaultProxy` that cuts the connection in the middle of the traffic.
@Suite(.serialized, .timeLimit(.minutes(6)))
struct SocketIODeliveryTests {
    static let modes: [(name: String, transports: [EngineIOOptions.Transport], upgrade: Bool)] = [
        ("polling", [.polling], false),
        ("websocket", [.websocket], false),
        ("polling then upgrade", [.polling, .websocket], true),
    ]

    /// 1,000 emits with the connection cut part-way (after a different byte count each run, FIN or
    /// RST): the server sees every one at least once, and the first arrivals are in emit order.
    /// Each run's emits carry the run's number, as in `reportsNameEachEmit`: an earlier run's emit
    /// that reaches the server late is checked against that run's `resent` events.
    @Test("a burst of 1,000 emits cut in the middle: every emit arrives, first arrivals in order", arguments: [0, 1, 2])
    func burstSurvivesACut(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        var duplicates = 0
        var late = 0
        var earlier: [(seen: Set<Int>, resent: Set<Int>)] = []
        for run in 0..<20 {
            let proxy = try await FaultProxy.start(targetPort: peer.port)
            var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
            configuration.offlineQueueCapacity = 2_000
            let manager = SocketManager(url: proxy.url(), configuration: configuration)
            let socket = manager.defaultSocket
            let resent = recordResentSeq(socket)
            let cutAfter = try await cutBurst(run: run, socket, through: proxy)
            var arrivals: [Int] = []
            for value in try await report(socket) {
                let (tag, index) = value.quotientAndRemainder(dividingBy: 100_000)
                if tag == run {
                    arrivals.append(index)
                } else if earlier.indices.contains(tag) {
                    late += 1
                    #expect(!earlier[tag].seen.contains(index) || earlier[tag].resent.contains(index), "run \(tag)'s emit \(index) arrived again in run \(run), never reported resent")
                } else {
                    Issue.record("run \(run): the server reports \(value), from no run of this test")
                }
            }
            #expect(proxy.statistics.connectionsCut >= 1, "run \(run): the cut after \(cutAfter) bytes happened")
            var seen = Set<Int>()
            var firsts: [Int] = []
            for value in arrivals where seen.insert(value).inserted { firsts.append(value) }
            #expect(firsts == Array(0..<1_000), "run \(run), cut after \(cutAfter) bytes: \(firsts.count) distinct, first out of order at \(zip(firsts, 0...).first { $0 != $1 }.map { "\($0)" } ?? "-")")
            duplicates += arrivals.count - firsts.count
            // Every emit that arrived twice was named by a resent event.
            var counts: [Int: Int] = [:]
            for value in arrivals { counts[value, default: 0] += 1 }
            let twice = Set(counts.filter { $0.value > 1 }.keys)
            let resentIndexes = Set(resent.values.map { $0 % 100_000 })
            #expect(twice.isSubset(of: resentIndexes), "run \(run): \(twice.subtracting(resentIndexes).sorted().prefix(10)) arrived twice, never reported resent")
            earlier.append((seen, resentIndexes))
            #expect(socket.droppedEmitCount == 0)
            manager.disconnect()
            await manager.waitUntilStopped()
            await proxy.stop()
        }
        print("burstSurvivesACut \(Self.modes[mode].name): 20 runs, \(duplicates) duplicate arrivals in all, \(late) arrivals of an earlier run's emits")
    }

    /// The cut burst with `emitIDs` on (SocketIOGuide, "De-duplication"): every copy of an emit
    /// that reaches the server, the re-sent ones included, carries that emit's one id, and no two
    /// emits share one, so a server that handles each id once handles each of the 1,000 emits
    /// exactly once. Late copies of an earlier run's emits are checked against that run's ids.
    @Test("emit ids: every copy of an emit carries its one id, so the server can handle each emit once", arguments: [0, 1, 2])
    func emitIDsMakeCopiesRecognisable(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        var idOf: [Int: String] = [:]  // every run's emits: run * 100_000 + index -> the id it arrived with
        var copies = 0
        for run in 0..<6 {
            let proxy = try await FaultProxy.start(targetPort: peer.port)
            var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
            configuration.offlineQueueCapacity = 2_000
            configuration.emitIDs = .lastArgument()
            let manager = SocketManager(url: proxy.url(), configuration: configuration)
            let socket = manager.defaultSocket
            let cutAfter = try await cutBurst(run: run, socket, through: proxy)
            let (withIDs, arrivals) = try await idReport(socket)
            #expect(proxy.statistics.connectionsCut >= 1, "run \(run): the cut after \(cutAfter) bytes happened")
            #expect(withIDs.count == arrivals, "run \(run): \(arrivals) arrivals, \(withIDs.count) with an id")
            var handled = Set<String>()  // what a server that handles each id once would handle
            var handledValues: [Int] = []
            for (value, id) in withIDs {
                if let known = idOf[value] {
                    #expect(known == id, "run \(run): emit \(value) arrived with \(known) and \(id)")
                } else {
                    idOf[value] = id
                }
                if value / 100_000 == run, handled.insert(id).inserted { handledValues.append(value % 100_000) }
            }
            #expect(handledValues == Array(0..<1_000), "run \(run): handled once each, in order: \(handledValues.count) handled")
            copies += withIDs.count { $0.0 / 100_000 == run } - 1_000
            manager.disconnect()
            await manager.waitUntilStopped()
            await proxy.stop()
        }
        #expect(Set(idOf.values).count == idOf.count, "no two emits share an id")
        if mode != 0 {
            // Polling re-sends only a POST that failed; the WebSocket modes re-send their window.
            #expect(copies > 0, "some emits arrived twice, so the ids were tested on copies")
        }
        print("emitIDsMakeCopiesRecognisable \(Self.modes[mode].name): 6 runs, \(copies) copies, each with its emit's id")
    }

    /// The same cut, with the offline queue too small to take everything back in every other run,
    /// checked emit by emit against what the server received: an emit reported `notSent` never
    /// arrived (nothing delivered is reported lost); an emit that never arrived was refused at the
    /// call or named by a `dropped` event (nothing lost is unreported); an emit that arrived twice
    /// was named by a `resent` event (every duplicate is announced). The counts agree with the
    /// events. Each run's emits carry the run's number (`run * 100_000 + index`), so an emit of an
    /// earlier run that reaches the server late (after the next run's `seq_reset`) is checked
    /// against that run's reports, not taken for a duplicate of this one. A wrong report prints the
    /// client's debug log and the proxy's counts.
    @Test("a cut burst: each emit's report is right (nothing delivered reported lost, nothing lost unreported, every duplicate announced)", arguments: [0, 1, 2])
    func reportsNameEachEmit(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        var totals = (notSent: 0, possiblySent: 0, possiblySentArrived: 0, resent: 0, duplicates: 0, refused: 0, late: 0)
        var ledgers: [DeliveryLedger] = []
        for run in 0..<8 {
            let proxy = try await FaultProxy.start(targetPort: peer.port)
            var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
            configuration.offlineQueueCapacity = run.isMultiple(of: 2) ? 50 : 2_000
            let log = NIOLockedValueBox<[String]>([])
            configuration.runtime = RealtimeRuntime.shared.logging(
                to: Logger(label: "delivery-run-\(run)") { _ in CapturingLogHandler(lines: log, logLevel: .debug) })
            let manager = SocketManager(url: proxy.url(), configuration: configuration)
            let socket = manager.defaultSocket
            let errors = Recorder<String>()
            socket.on(clientEvent: .error) { errors.append($0.arguments.first?.stringValue ?? "") }
            let dropped = Recorder<(index: Int, delivery: String)>()  // the seq emits dropped events name
            let droppedAll = Recorder<String>()  // every emit they name (seq_report may be one)
            socket.on(clientEvent: .dropped) { event in
                for emit in event.arguments {
                    let name = emit["event"]?.stringValue ?? "?"
                    droppedAll.append(name)
                    if name == "seq", let index = emit["data"]?.arrayValue?.first?.intValue {
                        dropped.append((index, emit["delivery"]?.stringValue ?? "missing"))
                    }
                }
            }
            let resent = Recorder<Int>()
            let resentAll = Recorder<String>()
            socket.on(clientEvent: .resent) { event in
                for emit in event.arguments {
                    let name = emit["event"]?.stringValue ?? "?"
                    resentAll.append(name)
                    if name == "seq", let index = emit["data"]?.arrayValue?.first?.intValue { resent.append(index) }
                }
            }
            try await socket.connect(timeout: .seconds(30))
            _ = try await socket.emitWithAck("seq_reset", arguments: [], timeout: .seconds(30))
            let cutAfter = 1_500 + (run * 3_511) % 8_000
            proxy.inject(.cutAfter(bytes: cutAfter, .clientToTarget, run % 4 < 2 ? .reset : .fin))
            var ledger = DeliveryLedger()
            for index in 0..<1_000 {
                do { try socket.emit("seq", arguments: [.number(Double(run * 100_000 + index))]) } catch { ledger.refused.insert(index) }
            }
            try await waitUntil("the kept emits flushed", limit: .seconds(30)) { socket.queuedEmitCount == 0 && socket.status == .connected }
            var late: [Int: Int] = [:]  // emits of earlier runs in this run's report, by run
            for value in try await report(socket) {
                let (tag, index) = value.quotientAndRemainder(dividingBy: 100_000)
                if tag == run {
                    ledger.arrivals[index, default: 0] += 1
                } else if ledgers.indices.contains(tag) {
                    ledgers[tag].arrivals[index, default: 0] += 1
                    late[tag, default: 0] += 1
                } else {
                    Issue.record("run \(run): the server reports \(value), from no run of this test")
                }
            }
            #expect(proxy.statistics.connectionsCut >= 1, "run \(run): the cut after \(cutAfter) bytes happened")

            for (index, kind) in dropped.values { ledger.delivery[index % 100_000] = kind }
            ledger.resent = Set(resent.values.map { $0 % 100_000 })
            ledgers.append(ledger)
            var wrong = ledger.wrongReports().map { "run \(run): \($0)" }
            for (tag, count) in late.sorted(by: { $0.key < $1.key }) {
                totals.late += count
                wrong += ledgers[tag].wrongReports().map { "run \(tag), \(count) of its emits arriving late in run \(run): \($0)" }
            }
            if !wrong.isEmpty {
                let statistics = proxy.statistics
                print("reportsNameEachEmit \(Self.modes[mode].name) run \(run): wrong reports; proxy: \(statistics.connectionsAccepted) connections, \(statistics.connectionsCut) cut, \(statistics.bytesToTarget) bytes to the server; client log:")
                // The HTTP client's own lines (a request per poll) are left out.
                for line in log.withLockedValue({ $0 }).filter({ !$0.contains("ahc-request-id") }).suffix(120) { print("  \(line)") }
            }
            #expect(wrong.isEmpty, "run \(run), cut after \(cutAfter) bytes: \(wrong.count) wrong reports: \(wrong.prefix(8))")
            // The counts agree with the events, and a drop is also an error event.
            let counts = socket.deliveryCounts
            #expect(counts.notSent + counts.possiblySent == droppedAll.values.count)
            #expect(counts.resent == resentAll.values.count)
            #expect(socket.droppedEmitCount == droppedAll.values.count)
            #expect(Set(droppedAll.values).isSubset(of: ["seq", "seq_report"]))
            if socket.droppedEmitCount > 0 {
                #expect(errors.values.contains { $0.contains("could not take back") }, "the drop was reported as an error event")
            }
            totals.notSent += ledger.delivery.values.count { $0 == "notSent" }
            let possibly = ledger.delivery.filter { $0.value == "possiblySent" }
            totals.possiblySent += possibly.count
            totals.possiblySentArrived += possibly.keys.count { ledger.arrivals[$0, default: 0] > 0 }
            totals.resent += ledger.resent.count
            totals.duplicates += ledger.arrivals.values.reduce(0) { $0 + max(0, $1 - 1) }
            totals.refused += ledger.refused.count
            manager.disconnect()
            await manager.waitUntilStopped()
            await proxy.stop()
        }
        #expect(totals.notSent + totals.possiblySent > 0, "the queue overflowed when frames were handed back in at least one run")
        print(
            "reportsNameEachEmit \(Self.modes[mode].name), 8 runs: \(totals.refused) refused at the call, \(totals.notSent) dropped notSent, \(totals.possiblySent) dropped possiblySent (\(totals.possiblySentArrived) of them had arrived), \(totals.resent) emits resent, \(totals.duplicates) duplicate arrivals, \(totals.late) arrivals of an earlier run's emits"
        )
    }

    /// What one run of `reportsNameEachEmit` was told and what the server received, by emit index.
    struct DeliveryLedger {
        var refused = Set<Int>()
        var delivery: [Int: String] = [:]
        var resent = Set<Int>()
        var arrivals: [Int: Int] = [:]

        /// Each emit whose report disagrees with what arrived.
        func wrongReports() -> [String] {
            var wrong: [String] = []
            for index in 0..<1_000 {
                let count = arrivals[index] ?? 0
                if refused.contains(index) {
                    if count > 0 { wrong.append("\(index): refused at the call, arrived \(count)x") }
                    continue
                }
                if let kind = delivery[index], kind != "notSent" && kind != "possiblySent" { wrong.append("\(index): delivery \(kind)") }
                if delivery[index] == "notSent" && count > 0 { wrong.append("\(index): reported notSent, arrived \(count)x") }
                if count == 0 && delivery[index] == nil { wrong.append("\(index): never arrived, not reported") }
                if count > 1 && !resent.contains(index) { wrong.append("\(index): arrived \(count)x, never reported resent") }
            }
            return wrong
        }
    }

    /// 300 emits with an ack, in flight at once, with the connection cut part-way (over polling, in
    /// the middle of a POST that carries some of them): an emit with an ack is never re-sent once
    /// written, so none arrives twice; an ack that succeeded means its emit arrived exactly once;
    /// every other ack fails with `connectionClosed` (written before the cut: the server may or
    /// may not have it), and none is left waiting. Emits still queued at the cut keep their ack and
    /// go out after the reconnect.
    @Test("emits with an ack in a cut burst: none arrives twice, an acked one arrived once, the rest fail with connectionClosed", arguments: [0, 1, 2])
    func ackEmitsInACutBurst(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        var totals = (acked: 0, closed: 0, closedArrived: 0)
        for run in 0..<6 {
            let proxy = try await FaultProxy.start(targetPort: peer.port)
            var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
            configuration.offlineQueueCapacity = 2_000
            let manager = SocketManager(url: proxy.url(), configuration: configuration)
            let socket = manager.defaultSocket
            let resent = Recorder<String>()
            socket.on(clientEvent: .resent) { event in
                for emit in event.arguments { resent.append(emit["event"]?.stringValue ?? "?") }
            }
            try await socket.connect(timeout: .seconds(30))
            _ = try await socket.emitWithAck("seq_reset", arguments: [], timeout: .seconds(30))
            let cutAfter = 1_200 + (run * 1_733) % 5_000
            proxy.inject(.cutAfter(bytes: cutAfter, .clientToTarget, run.isMultiple(of: 2) ? .reset : .fin))
            let outcomes = await withTaskGroup(of: (Int, Result<[JSONValue], any Error>).self) { group in
                for index in 0..<300 {
                    group.addTask {
                        // A minute: an ack left waiting past the reconnect fails the test as a timeout.
                        do {
                            return (index, .success(try await socket.emitWithAck("seq", arguments: [.number(Double(index))], timeout: .seconds(60))))
                        } catch {
                            return (index, .failure(error))
                        }
                    }
                }
                var outcomes: [Int: Result<[JSONValue], any Error>] = [:]
                for await (index, outcome) in group { outcomes[index] = outcome }
                return outcomes
            }
            var arrivals: [Int: Int] = [:]
            for value in try await report(socket) { arrivals[value, default: 0] += 1 }
            #expect(proxy.statistics.connectionsCut >= 1, "run \(run): the cut after \(cutAfter) bytes happened")
            var wrong: [String] = []
            for index in 0..<300 {
                let count = arrivals[index] ?? 0
                if count > 1 { wrong.append("\(index): arrived \(count)x") }
                switch outcomes[index] {
                case .success:
                    totals.acked += 1
                    if count != 1 { wrong.append("\(index): acked, arrived \(count)x") }
                case .failure(let error as RealtimeError) where error.code == .connectionClosed:
                    totals.closed += 1
                    totals.closedArrived += count
                case .failure(let error):
                    wrong.append("\(index): \(error)")
                case nil:
                    wrong.append("\(index): no outcome")
                }
            }
            #expect(wrong.isEmpty, "run \(run), cut after \(cutAfter) bytes: \(wrong.count) wrong: \(wrong.prefix(8))")
            #expect(!resent.values.contains("seq"), "an emit with an ack was re-sent")
            #expect(socket.droppedEmitCount == 0)
            manager.disconnect()
            await manager.waitUntilStopped()
            await proxy.stop()
        }
        #expect(totals.closed > 0, "some acks were cut")
        print(
            "ackEmitsInACutBurst \(Self.modes[mode].name), 6 runs of 300: \(totals.acked) acked, \(totals.closed) failed with connectionClosed (\(totals.closedArrived) of them had arrived)"
        )
    }

    /// Over a WebSocket with a small resend window (20 frames) and with none: a burst of 300 emits
    /// without an ack, cut part-way. Emits that left the window unconfirmed are not sent again and
    /// can no longer be named; they are counted (`deliveryCounts.leftResendWindow`) and reported
    /// in an `error` event. Every emit that never arrived is among them (nothing lost unreported),
    /// and they are never more than the emits written and not re-sent.
    @Test("emits that left the resend window before a cut are counted and reported", arguments: [20, 0])
    func emitsThatLeftTheWindowAreReported(window: Int) async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        var totals = (missing: 0, counted: 0)
        for run in 0..<4 {
            let proxy = try await FaultProxy.start(targetPort: peer.port)
            var configuration = SocketIOConfiguration.testing([.websocket], upgrade: false)
            configuration.offlineQueueCapacity = 2_000
            configuration.engine.resendWindow = ResendWindow(frames: window, bytes: 1 << 20)
            let manager = SocketManager(url: proxy.url(), configuration: configuration)
            let socket = manager.defaultSocket
            let errors = Recorder<String>()
            socket.on(clientEvent: .error) { errors.append($0.arguments.first?.stringValue ?? "") }
            let resent = recordResentSeq(socket)
            try await socket.connect(timeout: .seconds(30))
            _ = try await socket.emitWithAck("seq_reset", arguments: [], timeout: .seconds(30))
            let cutAfter = 600 + run * 900
            proxy.inject(.cutAfter(bytes: cutAfter, .clientToTarget, run.isMultiple(of: 2) ? .reset : .fin))
            for index in 0..<300 { try socket.emit("seq", arguments: [.number(Double(index))]) }
            try await waitUntil("the kept emits flushed", limit: .seconds(30)) { socket.queuedEmitCount == 0 && socket.status == .connected }
            let arrived = Set(try await report(socket))
            #expect(proxy.statistics.connectionsCut >= 1, "run \(run): the cut after \(cutAfter) bytes happened")
            let missing = (0..<300).filter { !arrived.contains($0) }
            let counts = socket.deliveryCounts
            #expect(socket.droppedEmitCount == 0)
            #expect(missing.count <= counts.leftResendWindow, "run \(run): \(missing.count) never arrived, \(counts.leftResendWindow) counted as having left the window")
            #expect(counts.leftResendWindow + Set(resent.values).count <= 300, "run \(run): counted \(counts.leftResendWindow), re-sent \(Set(resent.values).count)")
            if counts.leftResendWindow > 0 {
                #expect(errors.values.contains { $0.contains("\(counts.leftResendWindow) emits written before the connection dropped had left the resend window") }, "\(errors.values)")
            }
            totals.missing += missing.count
            totals.counted += counts.leftResendWindow
            manager.disconnect()
            await manager.waitUntilStopped()
            await proxy.stop()
        }
        #expect(totals.missing > 0, "the cuts lost emits that had left the window")
        print("emitsThatLeftTheWindowAreReported window \(window), 4 runs of 300: \(totals.missing) never arrived, \(totals.counted) counted as having left the window")
    }

    /// disconnect() while a reconnect attempt is under way (its handshake stalled in the network)
    /// ends the attempt too: when the network comes back the client holds no connection and the
    /// namespace does not connect again.
    @Test("disconnect() during a reconnect attempt ends the attempt", arguments: [0, 1])
    func disconnectDuringAnAttempt(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        // HTTPConnectionOptions.idleTimeout: a connection set up for a request cancelled meanwhile
        // (a handshake GET) waits in the pool unused for that long.
        let idleTimeout = Duration.seconds(2)
        var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
        configuration.runtime = RealtimeRuntime(http: HTTPConnectionOptions(idleTimeout: idleTimeout))
        let manager = SocketManager(url: proxy.url(), configuration: configuration)
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let connects = server.connectCount
        // Everything through the proxy stalls, the connection is cut: the attempt's handshake hangs.
        try await proxy.cutAndStallTheNextAttempt()
        manager.disconnect()
        proxy.resume()
        // A connection made after disconnect() would reach the server within this moment; its
        // absence is sampled.
        try await Task.sleep(for: .milliseconds(500))
        #expect(server.connectCount == connects, "the namespace did not connect again")
        #expect(socket.status != .connected)
        #expect(manager.connectionState.current == .disconnected(nil))
        // The attempt's connection is closed by its cancelled request, or by the pool after its idle
        // timeout when the request was cancelled before it reached the connection: waited for (a
        // connection never closed fails here).
        try await waitUntil("the attempt's connection was closed with the manager", limit: idleTimeout + .seconds(10)) {
            proxy.statistics.connectionsOpen == 0
        }
    }

    /// A peer that stops reading: emits stop being accepted (queueFull) instead of piling up, and
    /// every accepted emit arrives, in order, once the peer reads again. Against our server:
    /// python-engineio 4.15.1 on aiohttp reads a POST body with a single partial read, so a body
    /// that reaches it in two TCP segments (as after a stall) is cut and its packets dropped on the
    /// server (it logs a JSONDecodeError; run its peer with SIO_ERRLOG=<file> to see it).
    @Test("a stalled server: the send queue stays bounded, then everything accepted arrives in order", arguments: [0, 1])
    func stalledPeerBoundsTheSendQueue(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
        configuration.engine.sendQueueLimit = 64 * 1024
        configuration.offlineQueueCapacity = 100
        let manager = SocketManager(url: proxy.url(), configuration: configuration)
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        proxy.inject(.stall(.clientToTarget, for: nil))
        let padding = JSONValue.string(String(repeating: "p", count: 1_000))
        var accepted = 0
        var refusal: RealtimeError?
        while accepted < 200_000 {
            do {
                try socket.emit("record", arguments: [.number(Double(accepted)), padding])
                accepted += 1
            } catch let error as RealtimeError {
                refusal = error
                break
            }
            // A pause, not a condition: the emits keep coming while the writer fills the socket.
            if accepted % 500 == 0 { try await Task.sleep(for: .milliseconds(1)) }
        }
        #expect(refusal?.code == .queueFull, "emits were still accepted after \(accepted)")
        proxy.resume()
        // The offline queue moves into the session as it drains.
        try await waitUntil("the offline queue drained", limit: .seconds(30)) { socket.queuedEmitCount == 0 }
        // The echo is answered after the server handled everything emitted before it.
        for _ in 0..<40 {
            do {
                _ = try await socket.emitWithAck("echo", arguments: ["flush"], timeout: .seconds(10))
                break
            } catch let error as RealtimeError where error.code == .connectionClosed {
                continue
            }
        }
        var seen = Set<Int>()
        let firsts = server.recorded.compactMap { $0.first?.intValue }.filter { seen.insert($0).inserted }
        #expect(firsts == Array(0..<accepted))
        print("stalledPeerBoundsTheSendQueue \(Self.modes[mode].name): \(accepted) emits of 1 kB accepted before queueFull")
    }

    /// Records the index of every `seq` emit a `resent` event names.
    private func recordResentSeq(_ socket: SocketIOClient) -> Recorder<Int> {
        let resent = Recorder<Int>()
        socket.on(clientEvent: .resent) { event in
            for emit in event.arguments where emit["event"]?.stringValue == "seq" {
                if let index = emit["data"]?.arrayValue?.first?.intValue { resent.append(index) }
            }
        }
        return resent
    }

    /// The server's `(value, emit id)` of each `seq` that carried an id, and the count of all `seq`
    /// arrivals, taken together (`seq_ids`).
    private func idReport(_ socket: SocketIOClient) async throws -> ([(Int, String)], arrivals: Int) {
        let reply = try await ask("seq_ids", socket)
        let pairs = (reply.first?.arrayValue ?? []).compactMap { pair -> (Int, String)? in
            guard let value = pair.arrayValue?.first?.intValue, let id = pair.arrayValue?.last?.stringValue else { return nil }
            return (value, id)
        }
        return (pairs, reply.last?.intValue ?? -1)
    }

    /// Connects, clears the server's record, sets `proxy` to cut the connection part-way (after a
    /// byte count that depends on `run`, RST in even runs, FIN in odd ones) and emits 1,000 `seq`
    /// events tagged `run * 100_000 + index`. Returns the byte count.
    private func cutBurst(run: Int, _ socket: SocketIOClient, through proxy: FaultProxy) async throws -> Int {
        try await socket.connect(timeout: .seconds(30))
        _ = try await socket.emitWithAck("seq_reset", arguments: [], timeout: .seconds(30))
        let cutAfter = 1_000 + (run * 4_057) % 9_000
        proxy.inject(.cutAfter(bytes: cutAfter, .clientToTarget, run % 2 == 0 ? .reset : .fin))
        for index in 0..<1_000 {
            try socket.emit("seq", arguments: [.number(Double(run * 100_000 + index))])
        }
        return cutAfter
    }

    /// Asks the server for what it received (`seq_report`).
    private func report(_ socket: SocketIOClient) async throws -> [Int] {
        try await ask("seq_report", socket).first?.arrayValue?.compactMap(\.intValue) ?? []
    }

    /// Asks `event` with an ack; the ask itself may be cut (its ack then fails at once), so it is
    /// repeated until it gets through.
    private func ask(_ event: String, _ socket: SocketIOClient) async throws -> [JSONValue] {
        for _ in 0..<40 {
            do {
                return try await socket.emitWithAck(event, arguments: [], timeout: .seconds(20))
            } catch let error as RealtimeError where error.code == .connectionClosed || error.code == .queueFull || error.code == .timeout {
                // Cut, dropped by a full queue (reported), or unanswered on a loaded machine: ask
                // again after a short pause (a retry's spacing, not a wait for a condition).
                try await Task.sleep(for: .milliseconds(20))
                continue
            }
        }
        throw RealtimeError.Code.connectionClosed.failure
    }

    @Test("a pending ack fails at once with connectionClosed when the connection drops", arguments: [0, 1, 2])
    func pendingAckFailsOnDrop(mode: Int) async throws {
        let (_, transports, upgrade) = Self.modes[mode]
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        let proxy = try await FaultProxy.start(targetPort: peer.port)
        defer { Task { await proxy.stop() } }
        let manager = SocketManager(url: proxy.url(), configuration: .testing(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        // A minute-long timeout: an error other than connectionClosed, or none, fails the test.
        let stalled = Task { try await socket.emitWithAck("stall", arguments: [], timeout: .seconds(60)) }
        // The echo is answered after the server read the stall emit (one connection, in order).
        _ = try await socket.emitWithAck("echo", arguments: ["after"], timeout: .seconds(30))
        // Over polling the stall emit may share a POST with that echo, and the echo's answer (on the
        // GET) can come before the POST's own 200. POSTs go one at a time, so a second echo
        // answered means the first POST was confirmed.
        _ = try await socket.emitWithAck("echo", arguments: ["confirmed"], timeout: .seconds(30))
        await proxy.refuseConnections()
        proxy.cutAll(.reset)
        let result = await stalled.result
        #expect(throws: RealtimeError.self) { try result.get() }
        if case .failure(let error as RealtimeError) = result {
            #expect(error.code == .connectionClosed, "\(error)")
        }

        // An emit made while disconnected keeps its ack: it is sent after the reconnect.
        try await waitUntil("the drop was noticed") { socket.status != .connected }
        let queued = Task { try await socket.emitWithAck("echo", arguments: ["queued"], timeout: .seconds(20)) }
        try await waitUntil("the emit was queued") { socket.queuedEmitCount > 0 }
        try await proxy.acceptConnections()
        #expect(try await queued.value == ["queued"])
    }

    @Test("maxPayload: the handshake's limit is exposed; larger emits fail at once and the connection is untouched", arguments: ServerUnderTest.allCases)
    func maxPayloadIsEnforcedOnTheWayOut(server: ServerUnderTest) async throws {
        let peer = try await server.start(maxPayload: 1_000_000)
        let manager = SocketManager(url: peer.url, configuration: .testing())
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        #expect(manager.handshake?.maxPayload == 1_000_000)
        let sid = socket.sid

        let tooLong = JSONValue.string(String(repeating: "a", count: 1_100_000))
        #expect { try socket.emit("size", arguments: [tooLong]) } throws: { ($0 as? RealtimeError)?.code == .messageTooLarge }
        // 800,000 bytes of binary take 1,066,668 as base64 in a polling payload, which may carry it.
        await #expect { try await socket.emitWithAck("size", arguments: [.binary(Data(count: 800_000))], timeout: .seconds(30)) } throws: {
            ($0 as? RealtimeError)?.code == .messageTooLarge
        }
        // python-engineio on aiohttp reads a large POST body with one partial read and fails to
        // parse it (a server bug): the emit that fits is checked on our server only.
        if server == .inProcess {
            let fits = try await socket.emitWithAck("size", arguments: [.string(String(repeating: "b", count: 999_000))], timeout: .seconds(10))
            #expect(fits == [999_000])
        } else {
            #expect(try await socket.emitWithAck("size", arguments: ["small"], timeout: .seconds(30)) == [5])
        }
        #expect(socket.sid == sid)
        #expect(connects.values.count == 1, "no reconnect")
        manager.disconnect()
        await manager.waitUntilStopped()
        await peer.stop()
    }

    @Test("polling batches never exceed maxPayload (our server answers 413 to a larger POST)")
    func pollingBatchesFitMaxPayload() async throws {
        var options = SocketIOTestServer.Options()
        options.allowUpgrade = false
        let server = try await SocketIOTestServer.start(options: options)
        let manager = SocketManager(url: server.url, configuration: .testing([.polling], upgrade: false))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        let text = JSONValue.string(String(repeating: "c", count: 100_000))
        let sizes = try await withThrowingTaskGroup(of: [JSONValue].self) { group in
            for _ in 0..<30 { group.addTask { try await socket.emitWithAck("size", arguments: [text], timeout: .seconds(20)) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(sizes.count == 30)
        #expect(sizes.allSatisfy { $0 == [100_000] })
        #expect(connects.values.count == 1, "a batch over maxPayload would have been refused (413) and the session dropped")
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("websocket only: a binary attachment is checked as its own message", arguments: ServerUnderTest.allCases)
    func webSocketChecksEachMessage(server: ServerUnderTest) async throws {
        let peer = try await server.start(maxPayload: 1_000_000)
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: peer.url, configuration: .testing([.websocket], upgrade: false))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let reply = try await socket.emitWithAck("size", arguments: [.binary(Data(count: 800_000))], timeout: .seconds(10))
        #expect(reply == [800_000])
        await #expect { try await socket.emitWithAck("size", arguments: [.binary(Data(count: 1_000_001))], timeout: .seconds(30)) } throws: {
            ($0 as? RealtimeError)?.code == .messageTooLarge
        }
    }

    @Test("events as an AsyncSequence: in order, bounded, overflow counted, ends with the socket")
    func eventSequences() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: .testing())
        let socket = manager.defaultSocket
        let ticks = socket.events(named: "tick")
        let everything = socket.events
        try await socket.connect(timeout: .seconds(30))
        try socket.emit("count", arguments: [5])
        var received: [Int] = []
        for await event in ticks {
            received.append(event.arguments.first?.intValue ?? -1)
            if received.count == 5 { break }
        }
        #expect(received == [1, 2, 3, 4, 5])

        let small = socket.events(named: "tick", bufferSize: 2, overflow: .dropNewest)
        let seen = Recorder<Int>()
        socket.on("tick") { seen.append($0.arguments.first?.intValue ?? -1) }
        try socket.emit("count", arguments: [10])
        await seen.wait(for: 10)
        manager.disconnect()
        var kept: [Int] = []
        for await event in small { kept.append(event.arguments.first?.intValue ?? -1) }
        #expect(kept == [1, 2], "the buffer kept the first two; the loop ended when the socket disconnected")
        #expect(small.droppedCount == 8)

        var names: [String] = []
        for await event in everything { names.append(event.name) }
        #expect(names.filter { $0 == "tick" }.count == 15)
        #expect(names.first == "welcome")
        await manager.waitUntilStopped()
    }
}

extension RealtimeError.Code {
    var failure: any Error { TestFailure(description: "gave up: \(self)") }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
}
