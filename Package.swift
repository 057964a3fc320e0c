// swift-tools-version: 6.1

import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "swift-realtime",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .library(name: "RealtimeCore", targets: ["RealtimeCore"]),
        .library(name: "EventSourceClient", targets: ["EventSourceClient"]),
        .library(name: "IKEventSource", targets: ["IKEventSource"]),
        .library(name: "SocketIOEngine", targets: ["SocketIOEngine"]),
        .library(name: "SocketIO", targets: ["SocketIO"]),
        .library(name: "SignalRHub", targets: ["SignalRHub"]),
        .library(name: "SignalRClient", targets: ["SignalRClient"]),
        .library(name: "SpreadbotClient", targets: ["SpreadbotClient"]),
        .library(name: "RealtimeTesting", targets: ["RealtimeTesting"]),
        .executable(name: "realtime", targets: ["realtime"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", from: "1.6.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        .target(
            name: "RealtimeCore",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "WSCore", package: "swift-websocket"),
                .product(name: "WSCompression", package: "swift-websocket"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "EventSourceClient",
            dependencies: [
                "RealtimeCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "IKEventSource",
            dependencies: [
                "EventSourceClient", "RealtimeCore",
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SocketIOEngine",
            dependencies: [
                "RealtimeCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SocketIO",
            dependencies: [
                "SocketIOEngine", "RealtimeCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SignalRHub",
            dependencies: [
                "RealtimeCore",
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SignalRClient",
            dependencies: [
                "SignalRHub", "RealtimeCore",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SpreadbotClient",
            dependencies: [
                "RealtimeCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RealtimeTesting",
            dependencies: [
                "RealtimeCore", "SocketIOEngine", "SignalRHub", "SpreadbotClient",
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HummingbirdWSCompression", package: "hummingbird-websocket"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "realtime",
            dependencies: [
                "RealtimeCore", "EventSourceClient", "SocketIOEngine", "SignalRHub", "SpreadbotClient",
                "RealtimeTesting", "RealtimeBridge",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RealtimeBridge",
            dependencies: [
                "RealtimeCore", "EventSourceClient", "SocketIOEngine", "SignalRHub", "SpreadbotClient",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Examples/RealtimeBridge/Sources/RealtimeBridge",
        ),
        .executableTarget(
            name: "realtime-bridge",
            dependencies: [
                "RealtimeBridge", "SpreadbotClient",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Examples/RealtimeBridge/Sources/realtime-bridge",
        ),
        .executableTarget(
            name: "signalr-quickstart",
            dependencies: ["SignalRHub"],
            path: "Examples/SignalRQuickStart",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "DocSnippetTests",
            dependencies: [
                "RealtimeCore", "EventSourceClient", "IKEventSource", "SocketIOEngine", "SocketIO", "SignalRHub",
                "SignalRClient", "SpreadbotClient", "RealtimeTesting",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            // Doc samples bind values they never use (`let count: Int = try await ...`): those
            // warnings say nothing about the API, so they are silenced here only.
            swiftSettings: [.unsafeFlags(["-suppress-warnings"])]
        ),
        .testTarget(
            name: "RealtimeBridgeTests",
            dependencies: [
                "RealtimeBridge", "RealtimeCore", "RealtimeTesting", "SignalRHub", "SocketIOEngine", "SpreadbotClient",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "FaultMatrixTests",
            dependencies: [
                "RealtimeCore", "RealtimeTesting", "EventSourceClient", "SocketIOEngine", "SignalRHub", "SpreadbotClient",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "RealtimeCoreTests",
            dependencies: [
                "RealtimeCore", "RealtimeTesting",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "EventSourceClientTests",
            dependencies: [
                "EventSourceClient", "IKEventSource", "RealtimeCore", "RealtimeTesting",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            exclude: ["Peers"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "EventSourceCompatTests",
            dependencies: [
                "IKEventSource", "EventSourceClient", "RealtimeCore", "RealtimeTesting",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "EventSourceConformanceTests",
            dependencies: ["RealtimeCore", "EventSourceClient"],
            resources: [.copy("Resources/sse-vectors.json"), .copy("Resources/sse-vectors.md")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SocketIOEngineTests",
            dependencies: [
                "SocketIOEngine", "RealtimeCore", "RealtimeTesting",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            exclude: ["Peers"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SocketIOCompatTests",
            // IKEventSource and SignalRClient: MigrationDiagnosticsTests type-checks their
            // samples against the built modules.
            dependencies: ["SocketIO", "SocketIOEngine", "RealtimeCore", "RealtimeTesting", "IKEventSource", "SignalRClient"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CompatParityTests",
            // The compat modules are dependencies so that the build has their modules to type-check
            // the parity lists and the corpus (Tests/CompatParity) against.
            dependencies: ["SocketIO", "SignalRClient", "IKEventSource", "RealtimeTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SocketIOConformanceTests",
            dependencies: [
                "SocketIOEngine",
                .product(name: "OrderedCollections", package: "swift-collections"),
            ],
            resources: [
                .copy("Resources/socketio-vectors.json"), .copy("Resources/socketio-vectors.md"),
                .copy("Resources/socketio2-vectors.json"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SignalRConformanceTests",
            dependencies: [
                "SignalRHub", "RealtimeCore", "RealtimeTesting",
                .product(name: "OrderedCollections", package: "swift-collections"),
            ],
            resources: [.copy("Resources/signalr-vectors.json"), .copy("Resources/signalr-vectors.md")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SignalRHubTests",
            dependencies: [
                "SignalRHub", "RealtimeCore", "RealtimeTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            exclude: ["Peers"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SignalRHubCompatTests",
            dependencies: [
                "SignalRClient", "SignalRHub", "RealtimeCore", "RealtimeTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SpreadbotClientTests",
            dependencies: [
                "SpreadbotClient", "RealtimeCore", "RealtimeTesting",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)

// Fuzz targets for the parsers (Fuzz/RealtimeFuzz, run by Scripts/fuzz.sh with libFuzzer). They are
// in the manifest only when REALTIME_FUZZ is set, so normal builds, tests and CI never build them.
if Context.environment["REALTIME_FUZZ"] != nil {
    package.targets.append(
        .executableTarget(
            name: "RealtimeFuzz",
            dependencies: [
                "RealtimeCore", "SignalRHub", "SocketIOEngine",
                .product(name: "OrderedCollections", package: "swift-collections"),
            ],
            path: "Fuzz/RealtimeFuzz",
            swiftSettings: swiftSettings + [.unsafeFlags(["-parse-as-library"])]
        )
    )
}
