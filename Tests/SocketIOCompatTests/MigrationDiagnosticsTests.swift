import Foundation
import RealtimeTesting
import Testing

// Code ported from socket.io-client-swift, IKEventSource or the older SignalR Swift client compiles
// with the compat import, and without it the first error on each line names the module and the
// product to add. Each sample below is type-checked twice with the toolchain's swiftc against the
// modules of this build: once importing the main product (every marked line must fail with a message
// naming the compat product) and once importing the compat product (it must compile cleanly).

// Each type-check is a swiftc process of several seconds: the suite runs them one at a time and
// waits for each on a thread of its own (BlockingWork), so that the tests running beside it keep
// the concurrency pool's threads (two on a 2-core machine) and both cores are not taken by compilers.
@Suite("Migration diagnostics: seed spellings without the compat import name the product", .serialized)
struct MigrationDiagnosticsTests {
    /// A sample: the lines of a file after its imports; a line ending in `// needs compat` must fail
    /// without the compat import.
    struct Sample: CustomTestStringConvertible, Sendable {
        let mainModule: String
        let compatModule: String
        let body: String
        var testDescription: String { compatModule }
    }

    static let samples: [Sample] = [
        Sample(mainModule: "SocketIOEngine", compatModule: "SocketIO", body: #"""
        func ported() {
            let manager = SocketManager(socketURL: URL(string: "http://localhost:8080")!, config: [.log(true), .compress, .reconnectWait(2)]) // needs compat
            _ = SocketManager(socketURL: URL(string: "http://localhost:8080")!, config: ["log": true, "connectParams": ["userID": "7"]]) // needs compat
            let options: [SocketIOClientOption] = [.forceWebsockets(true), .version(.two)] // needs compat
            _ = options
            let socket = manager.defaultSocket
            socket.on(clientEvent: .connect) { data, ack in print("connected", data) } // needs compat
            socket.on("sendMsg") { data, ack in print(data) } // needs compat
            socket.once("welcome") { data, ack in ack.with("thanks") } // needs compat
            socket.connect(withPayload: ["token": "abc"]) // needs compat
            socket.connect(timeoutAfter: 5) { print("no connection") } // needs compat
            socket.emit("keepHeartbeat", with: ["hello"], completion: nil) // needs compat
            socket.emit("chat", "hello", 1) // needs compat
            socket.emitWithAck("ping", 1).timingOut(after: 2) { data in print(data) } // needs compat
            socket.emitWithAck("ping", with: [1]).timingOut(after: 2) { data in print(data) } // needs compat
            socket.disconnect()
        }
        """#),
        Sample(mainModule: "EventSourceClient", compatModule: "IKEventSource", body: #"""
        func ported() {
            let source = EventSource(url: URL(string: "http://127.0.0.1:8080/events")!, headers: ["Authorization": "Bearer x"]) // needs compat
            source.onOpen { print("open") } // needs compat
            source.onMessage { id, event, data in print(id ?? "", event ?? "", data ?? "") } // needs compat
            source.addEventListener("user-connected") { id, event, data in print(data ?? "") } // needs compat
            source.removeEventListener("user-connected") // needs compat
            source.onComplete { status, reconnect, error in print(status ?? 0, reconnect ?? false, error as Any) } // needs compat
            source.connect() // needs compat
            source.connect(lastEventId: "5") // needs compat
            print(source.retryTime) // needs compat
            print(source.events()) // needs compat
            source.disconnect() // needs compat
        }
        """#),
        Sample(mainModule: "SignalRHub", compatModule: "SignalRClient", body: #"""
        final class Delegate: HubConnectionDelegate { // needs compat
            func connectionDidOpen(hubConnection: HubConnection) {}
            func connectionDidFailToOpen(error: any Error) {}
            func connectionDidClose(error: (any Error)?) {}
        }
        func ported(delegate: Delegate) {
            var builder = HubConnectionBuilder(url: URL(string: "http://localhost:5000/chat")!) // needs compat
            builder = builder.withLogging(minLogLevel: .debug) // needs compat
            builder = builder.withHubConnectionDelegate(delegate: delegate) // needs compat
            builder = builder.withHttpConnectionOptions(configureHttpOptions: { options in _ = options }) // needs compat
            let connection = builder.build()
            connection.on(method: "NewMessage") { (user: String, message: String) in print(user, message) } // needs compat
            connection.on(method: "Many") { (extractor: ArgumentExtractor) in _ = extractor } // needs compat
            connection.invoke(method: "Add", 2, 3, resultType: Int.self) { result, error in print(result ?? 0, error as Any) } // needs compat
            connection.invoke(method: "Broadcast", arguments: ["a", "b"]) { error in print(error as Any) } // needs compat
            connection.send(method: "Broadcast", "a", "b") { error in print(error as Any) } // needs compat
            print(LogLevel.info) // needs compat
        }
        """#),
    ]

    @Test("without the compat import, each marked line's first error names the compat product", arguments: samples)
    func withoutTheCompatImport(_ sample: Sample) async throws {
        let file = try PortedSample.write(sample.body, importing: sample.mainModule)
        let result = try await PortedSample.run(file)
        #expect(result.status != 0, "the sample compiled without \(sample.compatModule)")
        let firstErrors = result.firstErrorPerLine
        let marked = sample.markedLines(offset: 2)
        #expect(!marked.isEmpty)
        for line in marked {
            let error = try #require(firstErrors[line], "line \(line) has no error:\n\(sample.line(line, offset: 2))\n\(result.output)")
            #expect(error.contains("is unavailable"), "line \(line): \(error)")
            #expect(error.contains("add the product \(sample.compatModule) (package swift-realtime)") || error.contains("import \(sample.compatModule) (product \(sample.compatModule))"),
                    "line \(line): \(error)")
        }
        // No error on a line that is not marked: the main product's own spellings stay valid.
        let unmarked = Set(firstErrors.keys).subtracting(marked)
        #expect(unmarked.isEmpty, "errors on unmarked lines: \(unmarked.sorted().map { "\($0): \(firstErrors[$0]!)" })")
    }

    @Test("with the compat import, the same sample compiles", arguments: samples)
    func withTheCompatImport(_ sample: Sample) async throws {
        let file = try PortedSample.write(sample.body, importing: sample.compatModule)
        let result = try await PortedSample.run(file)
        #expect(result.status == 0, "\(result.output)")
    }

    /// `connect()` exists in SocketIOEngine as an async function; the SocketIO module, which does not
    /// re-export SocketIOEngine, has only socket.io-client-swift's synchronous `connect()`, which
    /// returns at once in synchronous and async code alike. Without the compat import, synchronous
    /// code gets an error that the call is async.
    @Test("SocketIO: connect() is the synchronous one in any context; SocketIOEngine's is async")
    func socketIOConnectHasOneMeaningPerModule() async throws {
        let sync = """
            func ported(socket: SocketIOClient) {
                socket.connect()
            }
            """
        let inAsync = """
            func ported(socket: SocketIOClient) async {
                socket.connect()
                socket.connect(withPayload: nil)
            }
            """
        let syncCompat = try await PortedSample.run(try PortedSample.write(sync, importing: "SocketIO"))
        #expect(syncCompat.status == 0, "\(syncCompat.output)")
        let asyncCompat = try await PortedSample.run(try PortedSample.write(inAsync, importing: "SocketIO"))
        #expect(asyncCompat.status == 0, "\(asyncCompat.output)")
        #expect(!asyncCompat.output.contains("warning"), "\(asyncCompat.output)")
        let syncMain = try await PortedSample.run(try PortedSample.write(sync, importing: "SocketIOEngine"))
        #expect(syncMain.firstErrorPerLine[4]?.contains("'async' call in a function that does not support concurrency") == true, "\(syncMain.output)")
        let asyncMain = try await PortedSample.run(try PortedSample.write(inAsync, importing: "SocketIOEngine"))
        let error = asyncMain.firstErrorPerLine[4] ?? ""
        #expect(error.contains("is 'async' but is not marked with 'await'") || error.contains("call can throw"), "\(asyncMain.output)")
    }

    /// `start()` and `stop()` exist in SignalRHub too, as async functions, so no unavailable twin is
    /// declared (the compiler would rank it below the async one). Their meaning: in async code the
    /// async one, with or without the compat import; in synchronous code the compat one, and without
    /// the import an error that the call is async.
    @Test("start() and stop(): async in async code, the compat ones in synchronous code")
    func asyncNamesKeepOneMeaning() async throws {
        let signalR = (sync: """
            func ported(connection: HubConnection) {
                connection.start()
                connection.stop()
            }
            """, async: """
            func ported(connection: HubConnection) async throws {
                try await connection.start()
                await connection.stop()
            }
            """, missingAwait: """
            func ported(connection: HubConnection) async {
                connection.start()
                connection.stop()
            }
            """)
        for (main, compat, samples) in [("SignalRHub", "SignalRClient", signalR)] {
            // Synchronous code: the compat calls that return at once; without the import, an error.
            let syncCompat = try await PortedSample.run(try PortedSample.write(samples.sync, importing: compat))
            #expect(syncCompat.status == 0, "\(compat): \(syncCompat.output)")
            let syncMain = try await PortedSample.run(try PortedSample.write(samples.sync, importing: main))
            #expect(syncMain.status != 0)
            #expect(syncMain.firstErrorPerLine[4]?.contains("'async' call in a function that does not support concurrency") == true,
                    "\(main): \(syncMain.output)")
            // Async code: the async ones, both ways; forgetting await is an error both ways.
            for module in [main, compat] {
                let async = try await PortedSample.run(try PortedSample.write(samples.async, importing: module))
                #expect(async.status == 0, "\(module): \(async.output)")
                let missing = try await PortedSample.run(try PortedSample.write(samples.missingAwait, importing: module))
                let error = missing.firstErrorPerLine[4] ?? ""
                #expect(error.contains("is 'async' but is not marked with 'await'") || error.contains("call can throw"), "\(module): \(missing.output)")
            }
        }
    }
}

extension MigrationDiagnosticsTests.Sample {
    func markedLines(offset: Int) -> Set<Int> {
        Set(body.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            .filter { $0.element.hasSuffix("// needs compat") }.map { $0.offset + 1 + offset })
    }

    func line(_ number: Int, offset: Int) -> String {
        let lines = body.split(separator: "\n", omittingEmptySubsequences: false)
        let index = number - 1 - offset
        return lines.indices.contains(index) ? String(lines[index]) : ""
    }
}

/// A sample written to a file of its own, type-checked with RealtimeTesting's ``SwiftTypecheck``.
enum PortedSample {
    struct Result {
        let status: Int32
        let output: String
        /// The first error reported on each line of the checked file.
        let firstErrorPerLine: [Int: String]
    }

    /// Writes `body` after `import Foundation` and `import <module>` (so the body starts on line 3).
    static func write(_ body: String, importing module: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("realtime-migration-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("Ported.swift")
        try "import Foundation\nimport \(module)\n\(body)\n".write(to: file, atomically: true, encoding: .utf8)
        return file.path
    }

    /// Type-checks `file` in Swift 6 mode, then removes its directory.
    static func run(_ file: String) async throws -> Result {
        let result = try await SwiftTypecheck.run([file])
        try? FileManager.default.removeItem(atPath: (file as NSString).deletingLastPathComponent)
        return Result(status: result.status, output: result.output, firstErrorPerLine: result.errors(in: file).compactMapValues(\.first))
    }
}
